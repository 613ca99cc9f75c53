"""Patch ``multiprocessing.pool_workers``: a Pool whose every new worker dies starting up, for
GRACE seconds, fails with their error (BrokenPool); workers that die after working are still
replaced; ThreadPool is not touched. Standard library only.

Every scenario that could hang runs as a script in a child interpreter bounded by a timeout;
"before" runs the same script with the patch disabled (``MPCOMPAT_DISABLED_PATCHES``), where the
Pool keeps starting workers that fail, and the script's own wait for the result times out.
"""
import multiprocessing
import multiprocessing.pool
import pickle
import re
import sys

import pytest

import mpcompat
from pool_workers_helpers import flat, run_script
from testenv import missing_in_main

PATCH = "multiprocessing.pool_workers"
METHODS = ["fork", "spawn", "forkserver"]
DISABLED = {"MPCOMPAT_DISABLED_PATCHES": PATCH}

INIT = '''\
import multiprocessing, sys, time
import mpcompat
from pool_workers_helpers import double, open_db, outcome, report

if __name__ == "__main__":
    method, wait, missing = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    start = time.time()
    data = {}
    with multiprocessing.get_context(method).Pool(2, initializer=open_db,
                                                  initargs=(missing,)) as pool:
        data["map"] = outcome(lambda: pool.map_async(double, range(10), chunksize=1).get(wait))
        data["seconds"] = time.time() - start
        if data["map"]["type"] == "BrokenPool":
            data["apply"] = outcome(lambda: pool.apply_async(double, (1,)).get(wait))
            data["imap"] = outcome(lambda: list(pool.imap(double, range(5))))
    report(data)
'''


def worker_tracebacks(stderr, error):
    """How many tracebacks of workers that failed with ``error`` the output holds."""
    return sum(1 for line in stderr.splitlines() if line.startswith(error))


@pytest.mark.parametrize("method", METHODS)
def test_initializer_error_fails_fast_with_the_cause(method, tmp_path):
    missing = str(tmp_path / "no-such-dir" / "lookup.sqlite")
    data, proc = run_script(tmp_path, INIT, method, 60, missing, timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    result = data["map"]
    assert result["type"] == "BrokenPool" and result["runtime_error"], result
    text = flat(result["text"])
    assert "worker processes of this Pool failed while starting, in a row for " in text
    assert "(exit code 1), and none took a task" in text
    assert "The Pool starts no new workers, and its pending and new tasks fail with this " \
        "error." in text
    error = "FileNotFoundError: [Errno 2] No such file or directory: %r" % missing
    assert "mpcompat: Pool worker process (pid " in text and error in text
    assert "(while running the Pool's initializer open_db() at " in text
    assert "pool_workers_helpers.py, line " in text  # where it raised
    assert text.count("FileNotFoundError") == 1  # the cause once, at the end
    assert text.index("failed while starting") < text.index(error)
    assert 3 <= data["seconds"] < 30  # GRACE seconds of failing starts, then broken
    # tasks sent after the pool broke fail the same way, and the with block ends the program
    assert data["apply"]["type"] == data["imap"]["type"] == "BrokenPool"
    # no flood (issue 26): the workers print nothing, the parent one line as the first failed
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "mpcompat: Pool worker process "), proc.stderr
    assert ("failed while starting: %s (while running the Pool's initializer open_db() at " % (
        error,)) in proc.stderr and proc.stderr.endswith(
        "; the Pool starts another, and its waits report the workers that fail alike\n")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_initializer_error_respawns_forever_without_the_patch(method, tmp_path):
    missing = str(tmp_path / "no-such-dir" / "lookup.sqlite")
    data, proc = run_script(tmp_path, INIT, method, 5, missing, timeout=120, **DISABLED)
    assert data is not None, proc.stderr[-3000:]
    assert data["map"]["type"] == "TimeoutError"
    assert worker_tracebacks(proc.stderr, "FileNotFoundError") >= 4  # 2 workers, respawned


LATE = '''\
import multiprocessing, sys
from pool_workers_helpers import double, open_db, outcome, report

if __name__ == "__main__":
    import mpcompat  # only here: the spawn workers run without mpcompat
    with multiprocessing.get_context("spawn").Pool(2, initializer=open_db,
                                                   initargs=(sys.argv[1],)) as pool:
        data = {"map": outcome(lambda: pool.map_async(double, range(10), chunksize=1).get(60))}
    report(data)
'''


def test_workers_without_mpcompat_are_not_broken_on_a_guess(tmp_path):
    """Workers where mpcompat is not active say nothing and record nothing: the Pool cannot tell
    a start-up failure from a death in a task, so it is not broken on a guess; but no task waits
    for ever: each death fails the task the worker held."""
    data, proc = run_script(tmp_path, LATE, str(tmp_path / "missing.db"), timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"]["type"] == "WorkerLostError", data
    assert "died before it said it was ready for tasks, holding this task (exit code 1)" in \
        flat(data["map"]["text"])
    assert "FileNotFoundError" in proc.stderr


NO_GUARD = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import double, outcome, report

pool = multiprocessing.get_context(sys.argv[1]).Pool(2)
data = {"map": outcome(lambda: pool.map_async(double, range(10), chunksize=1).get(float(sys.argv[2])))}
pool.terminate()
pool.join()
report(data)
'''
BOOTSTRAP = "An attempt has been made to start a new process before the current process has " \
    "finished its bootstrapping phase."


# Python 3.14's forkserver imports the main module when it starts, and dies of its error (3.15
# ignores it); before 3.14 it never imported it.
FORKSERVER_DIES_OF_MAIN = sys.version_info[:2] == (3, 14)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_missing_main_guard_fails_fast_with_the_fix(method, tmp_path):
    data, proc = run_script(tmp_path, NO_GUARD, method, 60, timeout=120)
    if method == "forkserver" and FORKSERVER_DIES_OF_MAIN:
        err = flat(proc.stderr)
        assert data is None and proc.returncode == 1, proc.stderr[-3000:]
        assert "ConnectionResetError: [Errno 104] Connection reset by peer mpcompat: the " \
            "forkserver process (pid " in err, proc.stderr[-3000:]
        assert "before it could start this one; its own line, above on stderr, says why." \
            in err
        assert "Line 5 of scenario.py starts processes at module level, outside `if __name__ " \
            "== \"__main__\":`, so it ran again in the forkserver and failed there." in err
        assert err.count(BOOTSTRAP) == 1  # the forkserver's own traceback, with its note
        return
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"]["type"] == "BrokenPool"
    text = flat(data["map"]["text"])
    assert "failed while starting: RuntimeError: " + BOOTSTRAP in text, text
    assert "scenario.py, line 5 starts a new process" in text
    assert 'if __name__ == "__main__": pool = multiprocessing.get_context(sys.argv[1]).Pool(2)' \
        in text
    assert text.count(BOOTSTRAP) == 1
    # the workers print nothing (issue 33: each said the cause, and that its parent reports it);
    # the BrokenPool was raised, so the Pool says nothing more as it ends
    assert flat(proc.stderr).count(BOOTSTRAP) == 0, proc.stderr[-3000:]


def test_missing_main_guard_respawns_forever_without_the_patch(tmp_path):
    data, proc = run_script(tmp_path, NO_GUARD, "spawn", 5, timeout=120, **DISABLED)
    assert data is not None, proc.stderr[-3000:]
    assert data["map"]["type"] == "TimeoutError"
    assert flat(proc.stderr).count(BOOTSTRAP) >= 4


GUARDED_TASK = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import outcome, report

if __name__ == "__main__":
    def triple(x):
        return 3 * x

    with multiprocessing.get_context(sys.argv[1]).Pool(2) as pool:
        data = {"map": outcome(lambda: pool.map_async(triple, range(10), chunksize=1).get(float(sys.argv[2])))}
    report(data)
'''


def test_task_the_workers_cannot_unpickle(tmp_path):
    """The task fails with the worker's error and the main-guard note; the workers go on."""
    data, proc = run_script(tmp_path, GUARDED_TASK, "spawn", 60, timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"]["type"] == "AttributeError"
    text = flat(data["map"]["text"])
    assert "AttributeError: " + missing_in_main("triple") in text
    assert 'function triple is defined inside `if __name__ == "__main__":`' in text
    before, proc = run_script(tmp_path, GUARDED_TASK, "spawn", 5, timeout=120, **DISABLED)
    assert before is not None, proc.stderr[-3000:]
    assert before["map"]["type"] == "TimeoutError"


LIFECYCLE = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import (add, double, is_broken, log_pid_then_open_db, outcome, report,
                                  wait_for)

if __name__ == "__main__":
    pool = multiprocessing.get_context(sys.argv[1]).Pool(2, initializer=log_pid_then_open_db,
                                                         initargs=(sys.argv[3], sys.argv[2]))
    wait_for(lambda: is_broken(pool), 60)  # broken while nothing was asked of it
    errors = []
    data = {
        "apply_async": outcome(lambda: pool.apply_async(
            add, (1, 2), error_callback=errors.append).get(30)),
        "starmap": outcome(lambda: pool.starmap(add, [(1, 2)] * 5)),
        "imap_unordered": outcome(lambda: list(pool.imap_unordered(double, range(20), 3))),
        "many": outcome(lambda: pool.map(double, range(5000), chunksize=1)),
    }
    data["error_callback"] = [type(e).__name__ for e in errors]
    pool.close()
    pool.join()
    data["joined"] = True
    report(data)
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_broken_pool_fails_every_task_and_closes(method, tmp_path):
    missing = str(tmp_path / "missing.db")
    log = tmp_path / "pids.log"
    data, proc = run_script(tmp_path, LIFECYCLE, method, missing, str(log), timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    for name in ("apply_async", "starmap", "imap_unordered", "many"):
        assert data[name]["type"] == "BrokenPool", (name, data[name])
    assert data["error_callback"] == []  # refused at once: nothing was accepted to fail later
    assert data["joined"]
    # Once broken, the Pool starts no worker (a fork after the break could copy a lock another
    # thread holds, and hang in the child): the workers that died are those the error counts,
    # plus at most the 2 that were still starting when the pool broke, and die later.
    failed = int(re.search(r"(\d+) worker processes of this Pool failed",
                           flat(data["many"]["text"])).group(1))
    died = log.read_text().split()  # each worker's pid, as its initializer ran
    assert len(set(died)) == len(died)  # every worker started died, once
    assert failed <= len(died) <= failed + 2, (failed, died)
    # the workers print nothing; the parent said the cause once, as the first one failed
    said = re.findall(r"^mpcompat: Pool worker process (\d+) failed while starting: "
                      r"FileNotFoundError: ", proc.stderr, re.M)
    assert len(said) == 1 and said[0] in died, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


RESPAWN = '''\
import multiprocessing, os, signal, sys
import mpcompat
from pool_workers_helpers import double, is_broken, outcome, report, wait_for, worker_pids

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    data = {}
    if sys.argv[1] == "fork":
        with ctx.Pool(2, maxtasksperchild=1) as pool:  # every worker exits (code 0) and is replaced
            data["maxtasks"] = outcome(lambda: pool.map(double, range(12), chunksize=1))
            data["maxtasks_broken"] = is_broken(pool)
    pool = ctx.Pool(2)
    data["first"] = outcome(lambda: pool.map(double, range(4)))
    killed = []
    for _ in range(5):
        pid = worker_pids(pool)[0]
        os.kill(pid, signal.SIGKILL)  # as the OOM killer does
        killed.append(pid)
        wait_for(lambda: pid not in worker_pids(pool) and len(worker_pids(pool)) == 2, 60)
    data["replaced"] = not set(killed) & set(worker_pids(pool))
    data["broken"] = is_broken(pool)
    report(data)
    # An idle worker waits for a task holding the task queue's lock; killed, it never releases
    # it, and Pool.terminate() would wait for that lock for ever (as without mpcompat).
    for pid in worker_pids(pool):
        os.kill(pid, signal.SIGKILL)
    os._exit(0)
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_that_die_after_working_are_replaced(method, tmp_path):
    data, proc = run_script(tmp_path, RESPAWN, method, timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    if method == "fork":
        assert data["maxtasks"]["value"] == repr([2 * x for x in range(12)])
        assert not data["maxtasks_broken"]
    assert data["first"]["value"] == repr([0, 2, 4, 6])
    assert data["replaced"] and not data["broken"]


PARTLY = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import outcome, report, sleep_then_double, take_slot

if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2, initializer=take_slot,
                                                  initargs=(sys.argv[1],)) as pool:
        data = {"map": outcome(lambda: pool.map_async(sleep_then_double, [1.5], chunksize=1).get(60))}
    report(data)
'''


def test_pool_with_one_working_worker_keeps_working(tmp_path):
    """One worker starts well and works on a long task while the other keeps failing: the
    pool is not broken (the working one outlives the failures)."""
    data, proc = run_script(tmp_path, PARTLY, str(tmp_path / "slot"), timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"] == {"type": "ok", "value": "[3.0]", "text": "", "runtime_error": False}
    # the failures that came and went are said as they happened: once, as they fail alike
    assert proc.stderr.count("failed while starting: FileExistsError") == 1, proc.stderr


THREADS = '''\
import multiprocessing.pool
import mpcompat
from pool_workers_helpers import double, open_db, outcome, report

if __name__ == "__main__":
    with multiprocessing.pool.ThreadPool(2) as pool:
        data = {"map": outcome(lambda: pool.map(double, range(10)))}
    pool = multiprocessing.pool.ThreadPool(2, initializer=open_db, initargs=("/no/such/file",))
    data["failing"] = outcome(lambda: pool.map_async(double, range(4), chunksize=1).get(3))
    pool.terminate()
    pool.join()
    report(data)
'''


def test_thread_pool_is_not_touched(tmp_path):
    before, proc = run_script(tmp_path, THREADS, timeout=120, **DISABLED)
    assert before is not None and proc.returncode == 0, proc.stderr[-3000:]
    after, proc = run_script(tmp_path, THREADS, timeout=120)
    assert after is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert after["map"]["value"] == before["map"]["value"] == repr([2 * x for x in range(10)])
    # threads whose initializer raises: the results never come, as without the patch
    assert after["failing"]["type"] == before["failing"]["type"] == "TimeoutError"
    assert "BrokenPool" not in proc.stderr and proc.stderr.count("FileNotFoundError") >= 2


def test_patch_is_declared_applied_and_reversible(restore_mpcompat):
    pool_module = multiprocessing.pool
    Pool = pool_module.Pool
    names = ("_setup_queues", "_repopulate_pool_static", "_maintain_pool", "_terminate_pool",
             "_check_running", "_map_async")
    mpcompat.activate()
    states = {p.name: p.state for p in mpcompat.status().patches}
    assert states[PATCH] == "applied"
    worker = pool_module.worker
    originals = [worker.__wrapped__] + [p.original(Pool, n) for p in [_patch().patcher]
                                        for n in names]
    # the Process target pickles by reference, to the function bound at the module attribute
    assert (worker.__module__, worker.__qualname__) == ("multiprocessing.pool", "worker")
    assert pickle.loads(pickle.dumps(worker)) is worker
    mpcompat.deactivate()
    assert [pool_module.worker] + [Pool.__dict__[n] for n in names] == originals
    mpcompat.activate(disabled_patches=[PATCH])
    assert pool_module.worker is originals[0]
    assert {p.name: p.state for p in mpcompat.status().patches}[PATCH] == "disabled"
    mpcompat.activate()
    assert pool_module.worker.__wrapped__ is originals[0]
    assert all(Pool.__dict__[n] is not o for n, o in zip(names, originals[1:]))
    with multiprocessing.get_context("fork").Pool(1) as pool:  # still a working Pool
        assert pool.map(abs, [-1, -2]) == [1, 2]


def _patch():
    import importlib
    return importlib.import_module("mpcompat.patches.mp_pool_workers")


def test_broken_pool_error_type():
    from mpcompat import BrokenPool
    exc = BrokenPool("2 worker processes ...", [11, 12], [1, 1])
    assert isinstance(exc, RuntimeError)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is BrokenPool and copy.args == exc.args
    assert (copy.pids, copy.exitcodes) == ([11, 12], [1, 1])
