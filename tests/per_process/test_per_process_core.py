"""mpcompat.per_process without torch (runs on .venv, .venv38 and .venv313): behaviour as a
proxy, creation once per process (threads, fork, spawn), the on_fork rules, pickling as a
recipe, checks at creation, close()."""
import copy
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest

import mpcompat
from mpcompat.pickling.per_process import PerProcess, close, created
from mpcompat.rebuild import rebuild_per_process
from per_process_helpers import (Liar, Resource, Ticker, failing_factory, made_named,
                                 read_log, recursive_factory)
from testenv import child_env, race


def run_script(tmp_path, code, timeout=60, env=None, prelude=""):
    """Run ``prelude`` then ``code`` as a script file in a fresh interpreter; return its stdout
    (exit 0 required)."""
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(prelude) + textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], env=env or child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_nothing_is_created_until_first_use():
    p = mpcompat.per_process(Resource, "lazy-1")
    assert type(p) is PerProcess
    assert not created(p) and made_named("lazy-1") == 0
    assert "not created in this process (pid %d)" % os.getpid() in repr(p)
    assert "Resource('lazy-1')" in repr(p)
    assert p.name == "lazy-1"
    assert created(p) and made_named("lazy-1") == 1
    assert p.name == "lazy-1" and made_named("lazy-1") == 1  # once per process
    assert "created in this process (pid %d)" % os.getpid() in repr(p)


def _set_attr(p):
    p.extra = 7
    return p.__wrapped__.extra


def _use_with(p):
    with p as inner:
        entered = inner is p.__wrapped__ and not inner.closed
    return entered, inner.closed


# Every kind of operation on a fresh object creates it first, then acts on it.
OPERATIONS = [
    ("attribute", lambda p: p.name, "op"),
    ("method", lambda p: p.__getitem__(1), 2),
    ("call", lambda p: p(5), ("op", 5)),
    ("with", _use_with, (True, True)),
    ("iteration", lambda p: list(p), [1, 2, 3]),
    ("len", len, 3),
    ("bool", bool, True),
    ("isinstance", lambda p: isinstance(p, Resource), True),
    ("__class__", lambda p: p.__class__, Resource),
    ("str", str, "Resource(op)"),
    ("getitem", lambda p: p[0], 1),
    ("contains", lambda p: 2 in p, True),
    ("setattr", _set_attr, 7),
    ("hash", lambda p: hash(p) == hash(p.__wrapped__), True),
    ("eq", lambda p: p == p.__wrapped__, True),
    ("dir", lambda p: "secret" in dir(p), True),
    ("vars", lambda p: vars(p)["name"], "op"),
    ("format", lambda p: format(p, ""), "Resource(op)"),
]


@pytest.mark.parametrize("name,operation,expected", OPERATIONS, ids=[o[0] for o in OPERATIONS])
def test_every_operation_creates_the_object_first(name, operation, expected):
    p = mpcompat.per_process(Resource, "op")
    before = made_named("op")
    assert not created(p)
    assert operation(p) == expected
    assert created(p) and made_named("op") == before + 1


def test_next_and_iter_reach_an_iterator():
    p = mpcompat.per_process(Ticker)
    assert next(p) == 0 and next(p) == 1
    assert iter(p) is p.__wrapped__


def test_with_open_file_and_close_then_recreate(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("line1\nline2\n")
    with mpcompat.per_process(open, str(path)) as f:
        assert type(f) is io.TextIOWrapper and f.readline() == "line1\n"
    assert f.closed

    p = mpcompat.per_process(Resource, "closing")
    assert close(p) is False  # nothing created yet
    first = p.__wrapped__
    assert close(p) is True and first.closed and not created(p)
    assert p.name == "closing" and p.__wrapped__ is not first and not p.closed
    assert mpcompat.per_process.close is close and mpcompat.per_process.created is created
    with pytest.raises(TypeError):
        close(first)


def test_two_threads_first_touching_create_one_object():
    p = mpcompat.per_process(Resource, "raced", delay=0.05)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(id(p.__wrapped__)))
               for _ in range(8)]
    race(threads)
    assert made_named("raced") == 1
    assert seen == [id(p.__wrapped__)] * 8


def test_factory_that_uses_its_own_object_raises():
    holder = []
    p = mpcompat.per_process(recursive_factory, holder)
    holder.append(p)
    with pytest.raises(RuntimeError, match="uses the object it is creating"):
        p.name


def test_a_recipe_that_holds_its_own_object_is_shown_once_at_any_stack_depth(tmp_path):
    # The error's text reprs the recipe, which holds the object: unguarded, that recursed until
    # Python 3.8 aborted the interpreter ("Cannot recover from stack overflow") at some depths.
    holder = []
    p = mpcompat.per_process(recursive_factory, holder)
    holder.append(p)
    assert "([<mpcompat.per_process ...>])" in repr(p)
    out = run_script(tmp_path, """
        import mpcompat
        from per_process_helpers import recursive_factory

        def at_depth(n):
            if n:
                return at_depth(n - 1)
            holder = []
            p = mpcompat.per_process(recursive_factory, holder)
            holder.append(p)
            try:
                p.name
            except RuntimeError as exc:
                return str(exc)

        texts = [at_depth(depth) for depth in range(40)]
        assert all("uses the object it is creating" in t and len(t) < 400 for t in texts), texts
        print("ok")
    """)
    assert out.strip() == "ok"


def test_factory_errors_propagate_and_nothing_is_kept(tmp_path):
    p = mpcompat.per_process(failing_factory)
    with pytest.raises(RuntimeError, match="raised AttributeError: no such thing"):
        hasattr(p, "anything")  # not a silent False
    missing = tmp_path / "later.txt"
    q = mpcompat.per_process(open, str(missing))
    with pytest.raises(FileNotFoundError):
        q.read()
    assert not created(q)
    missing.write_text("now here")
    assert q.read() == "now here"


def test_pickle_holds_the_recipe_only():
    p = mpcompat.per_process(Resource, "pickled", log=None)
    secret = p.secret  # created and used here
    data = pickle.dumps(p)
    assert secret.encode() not in data and b"secret" not in data
    assert p.__reduce_ex__(4) == (rebuild_per_process, (Resource, ("pickled",), {"log": None}))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        q = pickle.loads(pickle.dumps(p, protocol))
        assert type(q) is PerProcess and not created(q)
        assert q.name == "pickled" and q.secret != secret


def test_pickle_of_a_used_open_file(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"HANDLE-CONTENT-" * 100)
    p = mpcompat.per_process(open, str(path), "rb")
    assert p.read(15) == b"HANDLE-CONTENT-"
    with pytest.raises(TypeError):
        pickle.dumps(p.__wrapped__)  # the handle itself does not pickle
    data = pickle.dumps(p)
    assert b"HANDLE-CONTENT" not in data and len(data) < 200
    q = pickle.loads(data)
    assert q.read(15) == b"HANDLE-CONTENT-"  # its own handle, from the start
    assert p.read(7) == b"HANDLE-"  # the original one went on where it was
    close(p)
    close(q)


def test_copy_is_a_new_recipe_not_a_copy_of_the_handle():
    p = mpcompat.per_process(Resource, "copied", log=None)
    p.name
    for q in (copy.copy(p), copy.deepcopy(p)):
        assert type(q) is PerProcess and not created(q)
        assert q.__reduce_ex__(2) == p.__reduce_ex__(2)
        assert q.secret != p.secret


def test_a_class_pickle_cannot_find_travels_by_module_path():
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(Liar)  # like lmdb.open: its __module__ says builtins
    p = mpcompat.per_process(Liar, 5)
    factory, args, kwargs = p.__reduce_ex__(4)[1]
    assert factory == ("per_process_helpers", "Liar") and args == (5,)
    q = pickle.loads(pickle.dumps(p))
    assert q.value == 5 and isinstance(q, Liar)
    assert "per_process_helpers.Liar(5)" in repr(q)


def test_bad_recipes_are_refused_at_creation(tmp_path):
    with pytest.raises(TypeError, match="factory must be callable"):
        mpcompat.per_process("not callable")
    with pytest.raises(TypeError, match="lambda.*defined at module level"):
        mpcompat.per_process(lambda: 1)

    def local_factory():
        return 1
    with pytest.raises(TypeError, match="local_factory.*cannot be pickled"):
        mpcompat.per_process(local_factory)
    with open(str(tmp_path / "f.txt"), "w") as handle:
        with pytest.raises(TypeError, match=r"args\[1\] \(TextIOWrapper\) cannot be pickled"):
            mpcompat.per_process(Resource, "x", handle)
    with pytest.raises(TypeError, match=r"kwargs\['log'\] \(lock\) cannot be pickled"):
        mpcompat.per_process(Resource, "x", log=threading.Lock())
    with pytest.raises(TypeError, match="on_fork must be"):
        mpcompat.per_process(Resource, "x", on_fork="sometimes")
    with pytest.raises(TypeError, match="on_fork"):
        mpcompat.per_process(Resource, "x", on_fork=lambda obj: None)
    with pytest.raises(TypeError, match="makes its object with its factory"):
        mpcompat.per_process(Resource, "x").__wrapped__ = 3


def test_import_mpcompat_imports_neither_wrapt_nor_per_process(tmp_path):
    out = run_script(tmp_path, """
        import sys
        import mpcompat, pickle
        print(sorted(m for m in sys.modules
                     if m.split(".")[0] == "wrapt" or m.startswith("mpcompat.pickling.per_process")))
        p = mpcompat.per_process(open, __file__)
        print("wrapt" in sys.modules, callable(mpcompat.per_process))
    """)
    assert out.split("\n")[:2] == ["[]", "True True"]


def test_per_process_stays_the_function_when_its_module_was_imported_first(tmp_path):
    # Unpickling one imports its module, mpcompat.pickling.per_process, first.
    out = run_script(tmp_path, """
        import pickle, types
        import mpcompat.pickling.per_process
        import mpcompat
        print(isinstance(mpcompat.per_process, types.FunctionType))
        p = mpcompat.per_process(open, __file__)
        print(p.read().split()[1])
        print(mpcompat.per_process.close(p), mpcompat.per_process.created(p))
    """)
    assert out.split("\n")[:3] == ["True", "pickle,", "True False"]


FORK_PRELUDE = """
    import multiprocessing, os, sys
    import mpcompat
    from per_process_helpers import *
    ctx = multiprocessing.get_context("fork")

    def run_child(target, *args):
        child = ctx.Process(target=target, args=args)
        child.start()
        child.join(30)
        assert child.exitcode == 0, child.exitcode
        return child.pid
"""


def test_fork_child_creates_its_own_and_leaves_the_parents_alone(tmp_path):
    log = str(tmp_path / "log")
    out = run_script(tmp_path, prelude=FORK_PRELUDE, code="""
    p = mpcompat.per_process(Resource, "shared", log=%r)
    parent_object = p.__wrapped__
    child_pid = run_child(fork_child_uses, p, %r)
    assert p.__wrapped__ is parent_object and not parent_object.closed
    assert mpcompat.per_process.created(p)
    print(os.getpid(), child_pid)
    """ % (log, log))
    lines = read_log(log)
    parent_pid, child_pid = map(int, out.split())
    assert parent_pid != child_pid
    assert [(e, pid) for e, n, pid in lines if n == "shared"] == [
        ("open", parent_pid), ("open", child_pid)]  # the inherited one: never closed, never freed
    child_events = [e for e, n, pid in lines if n == "child"]
    assert child_events == ["before-created=False", "repr-inherited=True", "use-shared",
                            "after-created=True", "child-object-pid=%d" % child_pid]


@pytest.mark.parametrize("rule,expected", [
    (None, []),
    ("keep", []),
    ("drop", ["del"]),
    ("close", ["close", "del"]),
    ("log_inherited", ["inherited", "del"]),
])
def test_on_fork_rules_act_on_the_inherited_object_in_the_child(tmp_path, rule, expected):
    log = str(tmp_path / "log")
    rule_text = "log_inherited" if rule == "log_inherited" else repr(rule)
    run_script(tmp_path, prelude=FORK_PRELUDE, code="""
    p = mpcompat.per_process(Resource, "ruled", log=%r, on_fork=%s)
    p.name
    run_child(fork_child_uses, p, %r)
    """ % (log, rule_text, log))
    lines = read_log(log)
    parent_pid = lines[0][2]
    child_pid = [pid for e, n, pid in lines if n == "child"][0]
    on_inherited = [e for e, n, pid in lines if n == "ruled" and pid == child_pid
                    and e != "open"]
    assert on_inherited == expected
    assert ("open", "ruled", child_pid) in lines  # and it made its own
    assert not [line for line in lines if line[2] == parent_pid and line[0] != "open"]


def test_on_fork_travels_in_the_pickle():
    p = mpcompat.per_process(Resource, "x", on_fork="drop")
    assert p.__reduce_ex__(2) == (rebuild_per_process, (Resource, ("x",), {}, "drop"))
    assert pickle.loads(pickle.dumps(p))._self_on_fork == "drop"


def test_keep_rule_protects_the_parents_buffered_writes(tmp_path):
    # A buffered file finalized in a fork child writes the parent's buffer a second time.
    results = {}
    for rule in (None, "drop"):
        path = str(tmp_path / ("out-%s.txt" % rule))
        run_script(tmp_path, prelude=FORK_PRELUDE, code="""
        f = mpcompat.per_process(open, %r, "a", on_fork=%r)
        f.write("P")  # still in the parent's buffer
        run_child(append_text, f, "C")
        f.close()
        """ % (path, rule))
        with open(path) as f:
            results[rule] = f.read()
    assert sorted(results[None]) == ["C", "P"]
    assert sorted(results["drop"]) == ["C", "P", "P"]


def test_fork_child_that_never_uses_it_does_not_touch_it(tmp_path):
    log = str(tmp_path / "log")
    run_script(tmp_path, prelude=FORK_PRELUDE, code="""
    holder = [mpcompat.per_process(Resource, "unused", log=%r, on_fork="drop")]
    holder[0].name
    run_child(fork_child_drops, holder, %r)
    assert len(holder) == 1 and made_named("unused") == 1
    """ % (log, log))
    lines = read_log(log)
    assert [e for e, n, pid in lines] == ["open", "dropped"]


def test_fork_while_another_thread_is_creating_it(tmp_path):
    # The creation lock held by a parent thread at fork time does not block the child.
    log = str(tmp_path / "log")
    run_script(tmp_path, prelude=FORK_PRELUDE, code="""
    import threading, time
    p = mpcompat.per_process(Resource, "slow", log=%r, delay=1.0)
    t = threading.Thread(target=lambda: p.name)
    t.start()
    time.sleep(0.3)
    run_child(fork_child_uses, p, %r)
    t.join()
    """ % (log, log), timeout=60)
    lines = read_log(log)
    opens = [pid for e, n, pid in lines if e == "open"]
    assert len(set(opens)) == 2, lines


@pytest.mark.parametrize("disabled", [None, "1"], ids=["active", "MPCOMPAT_DISABLE"])
def test_spawn_child_receives_the_recipe_and_creates_its_own(tmp_path, disabled):
    # per_process pickles by its own __reduce_ex__: it works with mpcompat disabled as well.
    out = str(tmp_path / "report.json")
    stdout = run_script(tmp_path, """
    import multiprocessing, os, pickle
    import mpcompat
    from per_process_helpers import Resource, Liar, spawn_child_reports

    if __name__ == "__main__":
        p = mpcompat.per_process(Resource, "sent")
        liar = mpcompat.per_process(Liar, 11)
        print(p.secret, liar.value, os.getpid())  # used in the parent before sending
        child = multiprocessing.get_context("spawn").Process(
            target=spawn_child_reports, args=(p, liar, %r))
        child.start()
        child.join(60)
        assert child.exitcode == 0
    """ % out, env=child_env(MPCOMPAT_DISABLE=disabled))
    secret, _, parent_pid = stdout.split()
    with open(out) as f:
        report = json.load(f)
    assert report["pid"] != int(parent_pid)
    assert report["created_before"] is False and report["created_after"] is True
    assert "not created in this process" in report["repr"]
    assert report["name"] == "sent" and report["object_pid"] == report["pid"]
    assert report["liar"] == 11
    assert report["module_imported"] and report["fresh_name"] == "made-in-child"
