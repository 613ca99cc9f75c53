"""Patch ``multiprocessing.pool_workers``: a Pool never loses a task. A worker that dies while it
holds a task (SIGKILL, SIGSEGV, ``os._exit``) fails that task in the parent at once, with the
worker's pid, its exit code or signal by name and the likely cause; a task the worker cannot
unpickle fails with the main-guard note; the Pool goes on. Without the patch each of these hangs
(the scenario's own wait times out). Every scenario runs in a child bounded by a timeout."""
import pytest

from one_report_helpers import own_lines
from pool_workers_helpers import flat, run_script
from testenv import missing_in_main

PATCH = "multiprocessing.pool_workers"
DISABLED = {"MPCOMPAT_DISABLED_PATCHES": PATCH}

LOST = '''\
import multiprocessing, sys, time
import mpcompat
from pool_workers_helpers import double, die, outcome, report

if __name__ == "__main__":
    class Guarded(object):  # under the main guard: spawn/forkserver workers cannot unpickle it
        pass

    method, wait = sys.argv[1], float(sys.argv[2])
    data = {}
    with multiprocessing.get_context(method).Pool(3) as pool:
        for how in ("SIGKILL", "SIGSEGV", "exit3"):
            start = time.time()
            data[how] = outcome(lambda: pool.map_async(die, [how], chunksize=1).get(wait))
            data[how]["seconds"] = time.time() - start
            data[how + "_then_apply"] = outcome(lambda: pool.apply(double, (21,)))
        if method != "fork":
            data["unpicklable"] = outcome(lambda: pool.map_async(double, [Guarded()]).get(wait))
            data["unpicklable_then_apply"] = outcome(lambda: pool.apply(double, (21,)))
        got = []
        def consume():
            for value in pool.imap(die, [1, 2, 3, "exit3", 5], chunksize=1):
                got.append(value)
        data["imap"] = outcome(consume)
        data["imap_got"] = got
        errors = []
        result = pool.apply_async(die, ("SIGKILL",), error_callback=errors.append)
        data["apply_async"] = outcome(lambda: result.get(wait))
        time.sleep(0.2)
        data["error_callback"] = [type(e).__name__ for e in errors]
    with multiprocessing.get_context(method).Pool(2, maxtasksperchild=1) as pool:
        data["maxtasks"] = outcome(lambda: pool.map_async(double, range(60), chunksize=1).get(wait))
    report(data)
'''


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_task_whose_worker_dies_fails_with_the_cause(method, tmp_path):
    data, proc = run_script(tmp_path, LOST, method, 60, timeout=240)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    causes = {"SIGKILL": ("killed by signal 9 (SIGKILL)", "Not the OOM killer ("),
              "SIGSEGV": ("killed by signal 11 (SIGSEGV)", "Its Python stack at the crash ("),
              "exit3": ("exit code 3", "the Pool goes on with a new worker")}
    for how, (code, hint) in causes.items():
        result = data[how]
        assert result["type"] == "WorkerLostError", (how, result)
        text = flat(result["text"])
        assert "the Pool worker process " in text and "died while running this task (%s)" % code \
            in text and hint in text, text
        assert result["seconds"] < 5, result  # at once, not after the scenario's 60 s wait
        assert data[how + "_then_apply"]["value"] == "42"
    if method != "fork":
        text = flat(data["unpicklable"]["text"])
        assert data["unpicklable"]["type"] == "AttributeError", data["unpicklable"]
        assert missing_in_main("Guarded") in text
        assert 'class Guarded is defined inside `if __name__ == "__main__":`' in text
        assert data["unpicklable_then_apply"]["value"] == "42"
    assert data["imap_got"] == [2, 4, 6]  # every result before the lost one, then the error
    assert data["imap"]["type"] == "WorkerLostError"
    assert data["apply_async"]["type"] == "WorkerLostError"
    assert data["error_callback"] == ["WorkerLostError"]  # called once
    assert data["maxtasks"]["value"] == repr([2 * x for x in range(60)])
    assert "WorkerLostError" not in proc.stderr and "BrokenPool" not in proc.stderr


HANG = '''\
import multiprocessing, os
import mpcompat
from pool_workers_helpers import die, outcome, report

if __name__ == "__main__":
    pool = multiprocessing.get_context("fork").Pool(2)
    report({"map": outcome(lambda: pool.map_async(die, ["SIGKILL"]).get(3))})
    os._exit(0)  # terminate() may wait for ever on the lock the killed worker held
'''


def test_without_the_patch_the_lost_task_hangs(tmp_path):
    data, proc = run_script(tmp_path, HANG, timeout=60, **DISABLED)
    assert data["map"]["type"] == "TimeoutError", proc.stderr[-3000:]
    data, proc = run_script(tmp_path, HANG, timeout=60)
    assert data["map"]["type"] == "WorkerLostError", proc.stderr[-3000:]


MANY = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import die, outcome, report

if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(2) as pool:
        results = [pool.apply_async(die, ("exit1" if 40 <= i < 44 else i,)) for i in range(100)]
        outcomes = [outcome(lambda: r.get(60)) for r in results]
    report({"ok": sum(o["type"] == "ok" for o in outcomes),
            "lost": [i for i, o in enumerate(outcomes) if o["type"] == "WorkerLostError"]})
'''


def test_workers_dying_mid_task_fail_only_their_tasks(tmp_path):
    data, proc = run_script(tmp_path, MANY, "fork", timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data == {"ok": 96, "lost": [40, 41, 42, 43]}


INTERRUPT = '''\
import multiprocessing, os, signal, sys, time
import mpcompat
from pool_workers_helpers import double, outcome, report, sleep_then_double

if __name__ == "__main__":
    # As in a terminal: a test run started in the background inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    data = {}
    with multiprocessing.get_context(sys.argv[1]).Pool(4) as pool:
        pending = pool.map_async(sleep_then_double, [1.0] * 4, chunksize=1)
        time.sleep(0.3)
        try:
            os.killpg(os.getpgid(0), signal.SIGINT)  # Ctrl-C in a terminal, Jupyter's interrupt
            time.sleep(2)
        except KeyboardInterrupt:
            data["interrupted"] = True
        for attempt in range(3):
            data["map%d" % attempt] = outcome(lambda: pool.map_async(double, range(8)).get(30))
    report(data)
'''


def test_a_caught_ctrl_c_leaves_a_working_pool(tmp_path):
    data, proc = run_script(tmp_path, INTERRUPT, "fork", timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["interrupted"]
    for attempt in range(3):
        assert data["map%d" % attempt]["value"] == repr([2 * x for x in range(8)]), data
    # each worker's KeyboardInterrupt traceback, as Python prints it, but mpcompat's frames
    lines = proc.stderr.splitlines()
    assert proc.stderr.count("\nKeyboardInterrupt\n") >= 4 and own_lines(lines) == [], \
        proc.stderr


SLOW_SERVICE = '''\
import multiprocessing, sys, time
import mpcompat
from pool_workers_helpers import double, outcome, report, wait_for_service

if __name__ == "__main__":
    ready_at = time.time() + float(sys.argv[2])
    with multiprocessing.get_context(sys.argv[1]).Pool(2, initializer=wait_for_service,
                                                     initargs=(ready_at,)) as pool:
        data = {"map": outcome(lambda: pool.map_async(double, range(8), chunksize=1).get(60))}
    report(data)
'''


def test_an_initializer_failing_for_a_while_is_ridden_out(tmp_path):
    """A service that is up after 1.5 s: the job finishes, as without mpcompat (a pool breaks
    only after GRACE seconds of nothing but failing starts)."""
    data, proc = run_script(tmp_path, SLOW_SERVICE, "fork", 1.5, timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"]["value"] == repr([2 * x for x in range(8)])
    assert "ConnectionRefusedError" in proc.stderr  # the workers did fail meanwhile


WEIRD = '''\
import multiprocessing, os, sys
import mpcompat
from pool_workers_helpers import double, outcome, raise_weird, report

if __name__ == "__main__":
    wait = float(sys.argv[2])
    pool = multiprocessing.get_context(sys.argv[1]).Pool(2)
    data = {"map": outcome(lambda: pool.map_async(raise_weird, range(3)).get(wait)),
            "then": outcome(lambda: pool.map_async(double, range(3)).get(wait))}
    report(data)
    os._exit(0)  # without the patch the result handler is dead: terminate() would wait for it
'''


def test_an_exception_the_parent_cannot_rebuild_fails_the_task(tmp_path):
    data, proc = run_script(tmp_path, WEIRD, "spawn", 60, timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["map"]["type"] == "TypeError", data
    text = flat(data["map"]["text"])
    assert "the result of this task could not be rebuilt in this process: unpickling " \
        "pool_workers_helpers.WeirdError raised TypeError" in text
    assert "must pass them all to Exception.__init__" in text
    assert data["then"]["value"] == "[0, 2, 4]"
    before, proc = run_script(tmp_path, WEIRD, "spawn", 5, timeout=120, **DISABLED)
    assert before["map"]["type"] == "TimeoutError", before
