"""The error hooks: pickling errors where multiprocessing starts processes and sends tasks,
and the bootstrapping error, gain notes saying what, where and why (no torch; 3.8-3.13).

Failing starts never reach a child (pickling comes first), so these tests are cheap; the
session ``spawn_pool`` serves the task tests.
"""
import concurrent.futures
import multiprocessing
import pickle
import re
import subprocess
import sys
import threading
from multiprocessing import reduction

import pytest

import diagnose_workers as w
import mpcompat
import workers
from testenv import LOCAL_OBJECT_ERROR, child_env
from mpcompat.diagnose.notes import add_note, notes_of
from mpcompat.patches import mp_children
from mpcompat.patching import PATCHES, apply_deferred

NOTES = "multiprocessing.pickling_notes"
BOOTSTRAP = "multiprocessing.bootstrap_notes"


def flat(text):
    """``text`` with all whitespace runs made single spaces (reports wrap long lines)."""
    return " ".join(text.split())


def note(exc):
    """The one mpcompat note on ``exc``, flattened; on 3.8-3.10 it must be in the message."""
    notes = notes_of(exc)
    assert len(notes) == 1, (exc, notes)
    if sys.version_info < (3, 11):
        assert notes[0] in str(exc)
    return flat(notes[0])


def start_error(process):
    """Start ``process``, which must fail; return the exception."""
    with pytest.raises(Exception) as info:
        process.start()
    return info.value


def test_hooks_are_declared_patches_and_reversible(restore_mpcompat):
    import multiprocessing.spawn as spawn
    for name in (NOTES, BOOTSTRAP):
        spec = {s.name: s for s in PATCHES}[name]
        assert spec.distributions == () and spec.supported == ">=3.8,<3.16"
    mpcompat.activate()
    apply_deferred()  # what the first Pool, Process start or pickling would do
    states = {p.name: p.state for p in mpcompat.status().patches}
    assert states[NOTES] == states[BOOTSTRAP] == "applied"
    dump, dumps = reduction.dump, reduction.ForkingPickler.__dict__["dumps"]
    check = spawn._check_not_importing_main
    original_dump = dump.__wrapped__
    original_dumps = mp_children.pickling_patcher.original(reduction.ForkingPickler, "dumps")
    assert original_dumps is not dumps
    original_check = check.__wrapped__
    assert original_dump.__module__ == "multiprocessing.reduction"
    mpcompat.deactivate()
    assert reduction.dump is original_dump
    assert reduction.ForkingPickler.__dict__["dumps"] is original_dumps
    assert spawn._check_not_importing_main is original_check
    mpcompat.activate(disabled_patches=[NOTES])
    assert reduction.dump is original_dump
    assert {p.name: p.state for p in mpcompat.status().patches}[NOTES] == "disabled"
    mpcompat.activate()
    apply_deferred()
    assert reduction.dump.__wrapped__ is original_dump
    assert reduction.ForkingPickler.__dict__["dumps"] is not original_dumps
    assert mp_children.pickling_patcher.original(reduction.ForkingPickler, "dumps") \
        is original_dumps


def test_nothing_changes_when_pickling_succeeds(spawn_pool):
    obj = {"numbers": list(range(20)), "function": w.add, "point": w.Point(1, 2)}
    hooked = reduction.ForkingPickler.__dict__["dumps"]
    original = mp_children.pickling_patcher.original(reduction.ForkingPickler, "dumps")
    assert original is not hooked
    assert bytes(reduction.ForkingPickler.dumps(obj)) == \
        bytes(original.__func__(reduction.ForkingPickler, obj))
    assert spawn_pool.apply(workers.echo, (obj,)) == obj


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_process_start_names_target_args_kwargs(method, restore_mpcompat):
    ctx = multiprocessing.get_context(method)

    def make():
        holder = w.Holder(cb=w.make_local_lambda(), lock=threading.Lock())
        return ctx.Process(target=w.add, args=(1, holder), kwargs={"b": threading.Event()})
    mpcompat.activate(disabled_patches=[NOTES])
    plain = start_error(make())
    assert notes_of(plain) == []
    mpcompat.activate()
    exc = start_error(make())
    assert type(exc) is type(plain) is LOCAL_OBJECT_ERROR
    # Two objects: from 3.14 the message holds each one's address.
    assert re.sub(" at 0x[0-9a-f]+", "", exc.args[0]).startswith(
        re.sub(" at 0x[0-9a-f]+", "", plain.args[0]))
    text = note(exc)
    assert "could not be started (start method %r): pickling it for the new process failed." \
        % method in text
    assert "args[1].cb (function diagnose_workers.make_local_lambda.<locals>.<lambda>)" in text
    assert "args[1].lock (_thread.lock object)" in text
    assert "kwargs['b'] (threading.Event object)" in text
    assert text.index("args[1].cb") < text.index("args[1].lock") < text.index("kwargs['b']")


def test_process_target_and_subclass_attributes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    exc = start_error(ctx.Process(target=w.LAMBDA, args=(1,)))
    assert type(exc) is pickle.PicklingError
    text = note(exc)
    assert "target (function diagnose_workers.<lambda>)" in text
    assert "A lambda has no name" in text
    with open(str(tmp_path / "log.txt"), "w") as log:
        exc = start_error(w.LoggingProcess(log))
    text = note(exc)
    assert type(exc) is TypeError
    assert "process.log (_io.TextIOWrapper object)" in text and "lazily" in text


def test_pool_and_executor_workers_name_the_initializer():
    ctx = multiprocessing.get_context("spawn")
    with pytest.raises(LOCAL_OBJECT_ERROR) as info:
        ctx.Pool(1, initializer=w.make_local_function())
    text = note(info.value)
    assert "Pool worker process could not be started (start method 'spawn')" in text
    assert "initializer (function diagnose_workers.make_local_function.<locals>.scale)" in text
    executor = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=ctx, initializer=w.pool_initializer, initargs=(threading.Lock(),))
    with pytest.raises(TypeError) as info:
        executor.submit(w.add, 1, 2).result(timeout=60)
    executor.shutdown(wait=False)
    text = note(info.value)
    assert "ProcessPoolExecutor worker process could not be started" in text
    assert "initargs[0] (_thread.lock object)" in text


def test_pool_tasks(spawn_pool):
    with pytest.raises(TypeError) as info:
        spawn_pool.apply(workers.echo, (w.Holder(lock=threading.Lock()),))
    text = note(info.value)
    assert "A task could not be sent to the Pool's worker processes" in text
    assert "args[0].lock (_thread.lock object)" in text
    with pytest.raises(LOCAL_OBJECT_ERROR) as info:
        spawn_pool.map(workers.echo, [1, 2, w.make_local_lambda(), 4], chunksize=2)
    text = note(info.value)
    assert "Task 1 of a Pool map" in text
    assert "chunk[0] (function diagnose_workers.make_local_lambda.<locals>.<lambda>)" in text
    with pytest.raises(TypeError) as info:
        spawn_pool.starmap(w.add, [(1, 2), (3, w.Holder(ev=threading.Event()))])
    assert "chunk[0][1].ev (threading.Event object)" in note(info.value)
    with pytest.raises(RuntimeError) as info:
        spawn_pool.apply(workers.echo, (multiprocessing.get_context("spawn").Lock(),))
    assert "args[0] (multiprocessing.synchronize.Lock object)" in note(info.value)
    assert "initargs" in note(info.value)
    assert spawn_pool.apply(w.add, (2, 3)) == 5  # the pool still works


def test_executor_tasks():
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as executor:
        future = executor.submit(workers.echo, w.Holder(lock=threading.Lock()))
        exc = future.exception(timeout=60)
        assert type(exc) is TypeError
        text = note(exc)
        assert "A task could not be sent to the ProcessPoolExecutor's worker processes" in text
        assert "args[0].lock (_thread.lock object)" in text
        with pytest.raises(LOCAL_OBJECT_ERROR) as info:
            list(executor.map(w.add, [1, 2, 3], [0, w.make_local_function(), 0], chunksize=3))
        text = note(info.value)
        assert "A task of ProcessPoolExecutor.map" in text
        assert "chunk[1][1] (function diagnose_workers.make_local_function.<locals>.scale)" \
            in text
        assert executor.submit(w.add, 2, 3).result(timeout=60) == 5


def test_queue_put_error_printed_by_the_feeder(capfd):
    queue = multiprocessing.get_context("spawn").Queue()
    queue.put(w.Holder(fn=w.make_local_function()))
    queue.close()
    queue.join_thread()
    err = flat(capfd.readouterr().err)
    assert "mpcompat: Pickling an object sent to another process" in err
    assert "obj.fn (function diagnose_workers.make_local_function.<locals>.scale)" in err


@pytest.mark.parametrize("exc, keeps_message", [
    (TypeError("cannot pickle 'x' object"), False),
    (pickle.PicklingError("Can't pickle <function f>"), False),
    (AttributeError("Can't pickle local object 'f.<locals>.g'"), False),
    (RuntimeError(), False),
    (KeyError("missing"), True),
    (OSError(5, "device gone"), True),
])
def test_add_note_keeps_type_and_args(exc, keeps_message):
    cls, args, message = type(exc), exc.args, str(exc)
    add_note(exc, "mpcompat: where and why")
    assert type(exc) is cls
    assert notes_of(exc) == ["mpcompat: where and why"]
    if sys.version_info >= (3, 11) or keeps_message:
        assert exc.args == args and str(exc) == message
    else:
        assert str(exc) == (message + "\n" if message else "") + "mpcompat: where and why"


def test_exceptions_with_their_own_str_keep_it():
    ctx = multiprocessing.get_context("spawn")
    exc = start_error(ctx.Process(target=w.echo, args=(w.KeyErrorOnPickle(),)))
    assert type(exc) is KeyError and exc.args == ("missing",)
    assert "args[0] (diagnose_workers.KeyErrorOnPickle object)" in flat(notes_of(exc)[0])
    exc = start_error(ctx.Process(target=w.echo, args=(w.OSErrorOnPickle(),)))
    assert type(exc) is OSError and exc.errno == 5 and exc.strerror == "device gone"
    assert "args[0] (diagnose_workers.OSErrorOnPickle object)" in flat(notes_of(exc)[0])


SCRIPT = '''\
import multiprocessing
import mpcompat

def work():
    pass

ctx = multiprocessing.get_context("spawn")
process = ctx.Process(target=work)
process.start()
process.join()
print("child exit code", process.exitcode)
'''


def test_bootstrap_error_names_the_line_and_the_guard(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], env=child_env(), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=120)
    assert "child exit code 1" in result.stdout, result.stderr
    err = result.stderr
    assert "RuntimeError:" in err and "An attempt has been made to start a new process" in err
    assert "mpcompat: %s, line 9 starts a new process" % script in err
    assert "    9 | process.start()" in err
    assert '    if __name__ == "__main__":\n        process.start()' in err
    plain = subprocess.run([sys.executable, str(script)], env=child_env(MPCOMPAT_DISABLE="1"),
                           cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
    assert "An attempt has been made" in plain.stderr and "mpcompat:" not in plain.stderr


def test_one_report_the_exact_text_a_user_reads(spawn_pool):
    """What follows the error line: from 3.14 CPython's own "when serializing" notes, then
    mpcompat's note with only what they lack (the path, the hint); the error once."""
    import traceback
    with pytest.raises(TypeError) as info:
        spawn_pool.apply(workers.echo, ({"a": [w.Holder(lock=threading.Lock())]},))
    text = "".join(traceback.format_exception_only(type(info.value), info.value))
    error = "TypeError: cannot pickle '_thread.lock' object"
    cpython = ["when serializing dict item 'lock'",
               "when serializing diagnose_workers.Holder state",
               "when serializing diagnose_workers.Holder object",
               "when serializing list item 0", "when serializing dict item 'a'",
               "when serializing tuple item 0",
               "when serializing tuple item 3"] if sys.version_info >= (3, 14) else []
    assert text.splitlines()[:len(cpython) + 5] == [error] + cpython + [
        "mpcompat: A task could not be sent to the Pool's worker processes: pickling it failed. "
        "What cannot be",
        "pickled, and why:",
        "  args[0]['a'][0].lock  (_thread.lock object)",
        "      hint:  Locks, conditions, events and queue.Queue objects belong to the threads of "
        "this"], text
    assert text.count("cannot pickle '_thread.lock' object") == 1
