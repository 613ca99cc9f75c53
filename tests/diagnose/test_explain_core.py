"""``mpcompat.explain`` / ``assert_picklable`` and their hints, on real objects (no torch).

Runs on Python 3.8, 3.11 and 3.13: no torch, lmdb or h5py here (see test_diagnose_libs.py).
"""
import collections
import ctypes
import functools
import io
import multiprocessing
import pickle
import queue
import socket
import sqlite3
import sys
import threading
import types
import weakref

import numpy as np
import pytest

import diagnose_workers as w
import mpcompat
from mpcompat.diagnose import walker
from testenv import LOCAL_OBJECT_ERROR, missing_in_main

LOCAL_ERROR = ("Can't pickle local object", "Can't get local object")  # <= 3.12, 3.13 and 3.14+


def only(report):
    """The single problem of ``report``."""
    assert not report.ok, str(report)
    assert len(report.problems) == 1, str(report)
    return report.problems[0]


# --- the report -------------------------------------------------------------------------------

def test_picklable_object_is_ok():
    report = mpcompat.explain({"a": [1, 2.0, "x"], "f": w.add, "h": w.FINE}, name="cfg")
    assert report.ok and report.problems == []
    assert str(report) == "cfg can be pickled."
    mpcompat.assert_picklable(w.FINE, name="fine")


def test_path_reads_like_python():
    lock = threading.Lock()
    problem = only(mpcompat.explain(w.deep_loader(lock), name="loader"))
    assert problem.path == "loader.dataset.pipeline.transforms[3].file_client.client"
    assert problem.type is type(lock)
    assert problem.error == "TypeError: cannot pickle '_thread.lock' object"
    text = str(mpcompat.explain(w.deep_loader(lock), name="loader"))
    assert text.splitlines()[0] == "loader cannot be pickled: 1 problem found."
    assert "loader.dataset.pipeline.transforms[3].file_client.client  (_thread.lock object)" in text
    assert "hint:" in text


def test_mapping_keys_and_sequence_items():
    obj = {"infos": [{"token": "a"}, {"token": "b", "hooks": (1, {3: w.LAMBDA})}]}
    problem = only(mpcompat.explain(obj, name="data"))
    assert problem.path == "data['infos'][1]['hooks'][1][3]"


def test_every_offender_up_to_the_limit():
    obj = [w.Holder(index=i, lock=threading.Lock() if i % 7 == 3 else None)
           for i in range(120)]
    report = mpcompat.explain(obj, name="items")
    assert len(report.problems) == 10 and report.truncated
    assert report.problems[0].path == "items[3].lock"
    assert "stopped after 10 problems; there may be more" in str(report)
    everything = mpcompat.explain(obj, name="items", limit=100)
    assert [p.path for p in everything.problems] == [
        "items[%d].lock" % i for i in range(120) if i % 7 == 3]
    assert not everything.truncated


def test_assert_picklable_raises_with_the_report():
    with pytest.raises(AssertionError) as info:
        mpcompat.assert_picklable(w.deep_loader(threading.RLock()), name="loader")
    assert "loader.dataset.pipeline.transforms[3].file_client.client" in str(info.value)
    assert "_thread.RLock" in str(info.value)


# --- following pickle's own route -------------------------------------------------------------

def test_slots_getstate_reduce_ex_and_namedtuple():
    for obj, path in [
        (w.Slotted(1, w.LAMBDA), "obj.second"),
        (w.Renaming(w.LAMBDA), "obj.value"),
        (w.Reducing([1, w.LAMBDA]), "obj.__reduce_ex__(%d)[1][0][1]" % pickle.DEFAULT_PROTOCOL),
        (w.Point(1, w.LAMBDA), "obj.y"),
        (functools.partial(w.add, w.LAMBDA, b=2), "obj.args[0]"),
        (functools.partial(w.add, 1, b=w.LAMBDA), "obj.keywords['b']"),
        (functools.partial(w.LAMBDA, 1), "obj.func"),
        (collections.defaultdict(w.make_local_lambda()), "obj.default_factory"),
        (collections.OrderedDict([("a", 1), ("b", w.LAMBDA)]), "obj['b']"),
    ]:
        assert only(mpcompat.explain(obj)).path == path


def test_copyreg_reducers_are_followed(restore_mpcompat):
    obj = w.Registered(w.Holder(lock=threading.Lock()))
    assert only(mpcompat.explain(obj)).path == "obj"  # no reducer: the object itself
    with mpcompat.registering({w.Registered: w.reduce_registered}):
        problem = only(mpcompat.explain(obj))
        assert problem.path == "obj.__reduce_ex__(%d)[1][0].lock" % pickle.DEFAULT_PROTOCOL
        assert mpcompat.explain(w.Registered([1, 2])).ok


def test_dict_views_fine_when_active_and_explained_when_not(restore_mpcompat):
    obj = {"config": w.Holder(class_names={"car": 1}.keys())}
    mpcompat.activate()
    assert mpcompat.explain(obj).ok
    mpcompat.deactivate()
    problem = only(mpcompat.explain(obj))
    assert problem.path == "obj['config'].class_names"
    assert problem.error == "TypeError: cannot pickle 'dict_keys' object"
    assert "import mpcompat" in problem.hint


def test_modules(restore_mpcompat):
    mpcompat.activate()
    assert mpcompat.explain(w.Holder(np=np)).ok
    fake = types.ModuleType("not_importable_anywhere")
    problem = only(mpcompat.explain(w.Holder(cfg=fake)))
    assert problem.path == "obj.cfg" and "not_importable_anywhere" in problem.error
    assert "Keep the values you need" in problem.hint
    mpcompat.deactivate()
    problem = only(mpcompat.explain(w.Holder(np=np)))
    assert problem.path == "obj.np" and "import mpcompat" in problem.hint


def test_cycles_and_shared_references():
    a, b = w.Holder(name="a"), w.Holder(name="b")
    a.peer, b.peer = b, a
    lock = threading.Lock()
    b.lock = lock
    a.same_lock = lock
    report = mpcompat.explain({"first": a, "again": [a, b]}, name="graph")
    assert [p.path for p in report.problems] in (
        ["graph['first'].peer.lock"], ["graph['first'].same_lock"])
    ring = []
    ring.append(ring)
    ring.append(w.LAMBDA)
    assert only(mpcompat.explain(ring)).path == "obj[1]"


class CountingPickler(pickle.Pickler):
    """The standard pickler, counting its dumps."""

    dumps = 0

    def dump(self, obj):
        CountingPickler.dumps += 1
        return super().dump(obj)


def test_one_offender_among_30000_costs_few_pickles():
    infos = [{"token": "%05d" % i, "boxes": np.ones((4, 7)), "cams": {"front": {"path": "x"}}}
             for i in range(30000)]
    infos[21345]["cams"]["front"]["reader"] = threading.Lock()
    dataset = w.Dataset(w.Pipeline([w.Transform("load")]), infos)
    CountingPickler.dumps = 0
    report = walker.explain_parts([("dataset", dataset)], name="dataset",
                                          pickler=CountingPickler)
    assert [p.path for p in report.problems] == [
        "dataset.infos[21345]['cams']['front']['reader']"]
    assert CountingPickler.dumps < 60, CountingPickler.dumps


def test_numpy_arrays_are_not_walked_element_by_element():
    arrays = {"a%d" % i: np.zeros((100, 100)) for i in range(200)}
    arrays["a57"] = w.LAMBDA
    assert only(mpcompat.explain(arrays)).path == "obj['a57']"
    grid = np.empty((3, 4), dtype=object)
    grid[:] = 1
    grid[2, 1] = threading.Lock()
    problem = only(mpcompat.explain({"grid": grid}))
    assert problem.path == "obj['grid'][2, 1]"


def test_recursing_getattr_does_not_break_the_walk():
    proxy = w.Proxy(w.Holder(lock=threading.Lock()), extra=[1, w.LAMBDA])
    report = mpcompat.explain(proxy, name="proxy")
    assert [p.path for p in report.problems] == ["proxy._target.lock", "proxy.extra[1]"]
    broken = w.BrokenProxy(None)
    del broken._target
    problem = only(mpcompat.explain({"model": broken}))
    assert problem.path == "obj['model']"
    assert problem.type is w.BrokenProxy and problem.error.startswith("RecursionError")
    assert "BrokenProxy" in problem.hint or "Proxy.__getattr__ calls itself" in problem.hint


def test_recursing_object_with_collector_callbacks_does_not_abort_the_interpreter():
    # On Python 3.8, code run by a garbage collection just after a RecursionError (a finalizer,
    # a gc callback) that recurses again aborts the interpreter: CI lost a whole run to it.
    from testenv import run_python
    code = "\n".join([
        "import gc, sys",
        "sys.path.insert(0, 'tests')",
        "import mpcompat, diagnose_workers as w",
        "def deep(n):",
        "    return 0 if n == 0 else deep(n - 1) + 1",
        "def during_collection(phase, info):",
        "    try:",
        "        deep(60)",
        "    except RecursionError:",
        "        pass",
        "gc.callbacks.append(during_collection)",
        "for _ in range(30):",
        "    broken = w.BrokenProxy(None)",
        "    del broken._target",
        "    problem, = mpcompat.explain({'model': broken}).problems",
        "print(problem.path, problem.error.split(':')[0])",
    ])
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["obj['model']", "RecursionError"]


def test_main_module_objects_when_children_cannot_import_main(tmp_path):
    from testenv import run_python
    code = "\n".join([
        "import multiprocessing, threading, mpcompat",
        "def work():",
        "    pass",
        "class Config(object):",
        "    pass",
        "print(mpcompat.explain({'target': work, 'config': Config()}, name='job'))",
        "p = multiprocessing.get_context('spawn').Process(target=work)",
        "p.start(); p.join()",
        "print('exitcode', p.exitcode)",
    ])
    result = run_python(code, timeout=120)
    out = result.stdout
    flat = " ".join(out.split())
    assert "job cannot be pickled: 2 problems found." in out, result.stderr
    assert "job['target']  (function __main__.work)" in out
    assert "job['config']  (__main__.Config object)" in out
    assert "defined in __main__" in flat and "Move it into a module" in flat
    # ... which is what really happens in the child:
    assert "exitcode 1" in out
    assert missing_in_main("work", "__main__") in result.stderr
    script = tmp_path / "script.py"
    script.write_text("\n".join(code.splitlines()[:6]) + "\n")
    from_file = run_python("import runpy, sys; sys.argv = [sys.argv[1]]; "
                           "runpy.run_path(sys.argv[0], run_name='__main__')", str(script))
    assert "job can be pickled." in from_file.stdout, from_file.stderr


# --- hints, each with the real object --------------------------------------------------------

def test_hint_lambda_module_level_and_local():
    problem = only(mpcompat.explain(w.Holder(transform=w.LAMBDA)))
    assert problem.path == "obj.transform"
    assert "lambda" in problem.hint and "functools.partial" in problem.hint
    problem = only(mpcompat.explain(w.Holder(transform=w.make_local_lambda())))
    assert problem.error.startswith(LOCAL_OBJECT_ERROR.__name__ + ": ") and any(
        text in problem.error for text in LOCAL_ERROR)
    assert "make_local_lambda" in problem.hint and "functools.partial" in problem.hint


def test_hint_local_function_and_class():
    problem = only(mpcompat.explain(w.Holder(fn=w.make_local_function())))
    assert any(text in problem.error for text in LOCAL_ERROR)
    assert "make_local_function.<locals>.scale is a function defined inside " \
           "make_local_function" in problem.hint
    assert "Move it to module level" in problem.hint
    problem = only(mpcompat.explain(w.Holder(config=w.make_local_instance())))
    assert problem.path == "obj.config"
    assert problem.what.endswith("make_local_instance.<locals>.LocalConfig object")
    assert "It is an instance of" in problem.hint and "is a class defined inside" in problem.hint


def test_hint_bound_method_of_unpicklable_object():
    owner = w.Holder(lock=threading.Lock())
    problem = only(mpcompat.explain(w.Holder(callback=owner.method), name="task"))
    assert problem.path == "task.callback.__self__.lock"
    assert "bound method task.callback" in problem.hint
    assert "__setstate__" in problem.hint


@pytest.mark.parametrize("kind", ["file", "binary file", "socket", "sqlite3"])
def test_hint_open_handles_lazy_open(kind, tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x")
    handle = {"file": lambda: open(str(path)), "binary file": lambda: open(str(path), "rb"),
              "socket": socket.socket, "sqlite3": lambda: sqlite3.connect(":memory:")}[kind]()
    try:
        problem = only(mpcompat.explain(w.Holder(reader=handle), name="dataset"))
        assert problem.path == "dataset.reader"
        factory = {"file": 'open, path, "rb"', "binary file": 'open, path, "rb"',
                   "socket": "socket.create_connection, address",
                   "sqlite3": "sqlite3.connect, path"}[kind]
        # mpcompat.per_process first, the hand-written lazy open as the alternative
        fix = "self.reader = mpcompat.per_process(%s)" % factory
        assert fix in problem.hint
        assert problem.hint.index(fix) < problem.hint.index("open it lazily yourself")
        assert "self.reader = None" in problem.hint and 'state["reader"] = None' in problem.hint
        opener = {"file": 'open(self.path, "rb")', "binary file": 'open(self.path, "rb")',
                  "socket": "socket.create_connection(", "sqlite3": "sqlite3.connect("}[kind]
        assert opener in problem.hint
    finally:
        handle.close()


@pytest.mark.parametrize("kind", ["lock", "rlock", "condition", "event", "semaphore", "barrier",
                                  "queue", "thread"])
def test_hint_locks_conditions_events_threads(kind):
    obj = {"lock": threading.Lock, "rlock": threading.RLock, "condition": threading.Condition,
           "event": threading.Event, "semaphore": threading.Semaphore,
           "barrier": lambda: threading.Barrier(2), "queue": queue.Queue,
           "thread": lambda: threading.Thread(target=print)}[kind]()
    problem = only(mpcompat.explain(w.Holder(sync=obj), name="worker"))
    assert problem.path == "worker.sync"  # the object itself, not a lock inside it
    assert problem.type is type(obj)
    assert "def __setstate__(self, state):" in problem.hint
    if kind == "thread":
        assert "thread" in problem.hint
    else:
        factory = {"lock": "threading.Lock()", "rlock": "threading.RLock()",
                   "condition": "threading.Condition()", "event": "threading.Event()",
                   "semaphore": "threading.Semaphore()", "barrier": "threading.Barrier()",
                   "queue": "queue.Queue()"}[kind]
        assert "self.sync = %s" % factory in problem.hint


def test_hint_generators_and_iterators():
    import csv
    problem = only(mpcompat.explain(w.Holder(samples=(i for i in range(3)))))
    assert problem.error == "TypeError: cannot pickle 'generator' object"
    assert "generator" in problem.hint and "__iter__" in problem.hint
    problem = only(mpcompat.explain(w.Holder(rows=csv.reader(io.StringIO("a,b")))))
    assert "iterator" in problem.hint


def test_hint_weak_references():
    target = w.Holder()
    for obj in (weakref.ref(target), weakref.WeakValueDictionary({"t": target}),
                weakref.WeakSet([target])):
        problem = only(mpcompat.explain(w.Holder(cache=obj)))
        assert problem.path == "obj.cache" and problem.type is type(obj)
        assert "Weak references" in problem.hint and "__setstate__" in problem.hint


def test_hint_memoryview_and_ctypes():
    problem = only(mpcompat.explain(w.Holder(buf=memoryview(b"abc"))))
    assert "bytes(view)" in problem.hint
    for obj in (ctypes.pointer(ctypes.c_int(1)), ctypes.CDLL(None).printf):
        problem = only(mpcompat.explain(w.Holder(ptr=obj)))
        assert problem.error.startswith("ValueError: ctypes objects containing pointers")
        assert "ctypes pointers and foreign functions" in problem.hint


def test_hint_multiprocessing_lock_outside_process_creation():
    problem = only(mpcompat.explain(w.Holder(lock=multiprocessing.get_context("spawn").Lock())))
    assert problem.error.startswith("RuntimeError:") and "inheritance" in problem.error
    assert "initargs" in problem.hint and "Manager()" in problem.hint


def test_hint_generic_and_reference_mismatch():
    problem = only(mpcompat.explain([w.NoPickle()]))
    assert problem.path == "obj[0]"
    assert "mpcompat.register(NoPickle, reducer)" in problem.hint
    replaced = types.FunctionType(w.add.__code__, w.add.__globals__, "add")
    problem = only(mpcompat.explain(replaced))
    assert "does not lead back to this" in problem.hint


# --- command line ------------------------------------------------------------------------------

def test_cli_exit_codes(capsys):
    from mpcompat.cli.main import main
    assert main(["explain", "diagnose_workers:FINE"]) == 0
    assert capsys.readouterr().out.strip() == "FINE can be pickled."
    assert main(["explain", "diagnose_workers:BROKEN", "--limit", "5"]) == 1
    out = capsys.readouterr().out
    assert "BROKEN.callbacks[2]  (function diagnose_workers.<lambda>)" in out
    assert "BROKEN.lock  (_thread.lock object)" in out
    assert main(["explain", "diagnose_workers:BROKEN.lock"]) == 1
    assert "BROKEN.lock  (_thread.lock object)" in capsys.readouterr().out
    for bad in ("no_such_module_here:x", "diagnose_workers:NOPE", "diagnose_workers"):
        assert main(["explain", bad]) == 2
        assert "mpcompat explain:" in capsys.readouterr().err


def test_cli_as_python_dash_m():
    import subprocess
    from testenv import REPO, child_env
    result = subprocess.run([sys.executable, "-m", "mpcompat", "explain",
                             "diagnose_workers:BROKEN"], env=child_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "BROKEN cannot be pickled: 2 problems found." in result.stdout
