"""MPCOMPAT_HANG_DUMP with the standard library: a ThreadPool result, Pool results (fork, spawn,
forkserver workers blocked on a lock), concurrent.futures futures (ProcessPoolExecutor worker
blocked) waited for too long dump the stacks of the waiting process and of its workers, again
after twice as long, and kill nothing (Python 3.8, 3.11 and 3.13; no torch).

Each scenario is a real script in a child process, run in its own session and released through
stdin once its dumps are there; the stuck scenarios run side by side (module fixture), with
MPCOMPAT_HANG_DUMP=1 and, for two of them, without it (the "before").
"""
import json
import math
import subprocess
import sys
import textwrap

import pytest

import hang_dump_helpers as h
from testenv import child_env

WAITS = "# <-- waits"
STUCK = "# <-- stuck"

THREADPOOL = textwrap.dedent('''
    import threading
    from multiprocessing.pool import ThreadPool
    from hang_dump_helpers import release_on_stdin

    gate = threading.Event()


    def blocked():
        gate.wait()  # <-- stuck
        return "released"


    if __name__ == "__main__":
        release_on_stdin(gate.set)
        with ThreadPool(2) as pool:
            result = pool.apply_async(blocked)
            print(result.get())  # <-- waits
''')

POOL = textwrap.dedent('''
    import multiprocessing
    import sys
    from hang_dump_helpers import release_on_stdin


    def init(lock):
        global LOCK
        LOCK = lock


    def work(x):
        LOCK.acquire()  # <-- stuck
        LOCK.release()
        return x * 2


    if __name__ == "__main__":
        ctx = multiprocessing.get_context(sys.argv[1])
        lock = ctx.Lock()
        lock.acquire()
        release_on_stdin(lock.release)
        with ctx.Pool(2, init, (lock,)) as pool:
            run = pool.map if sys.argv[2] == "map" else lambda f, xs: list(pool.imap(f, xs))
            print(run(work, range(4)))  # <-- waits
''')

FUTURES = textwrap.dedent('''
    import concurrent.futures as cf
    import multiprocessing
    import sys
    from hang_dump_helpers import release_on_stdin


    def init(event):
        global EVENT
        EVENT = event


    def work(x):
        EVENT.wait()  # <-- stuck
        return x + 1


    def outcome(futures, how):
        if how == "result":
            return futures[0].result()
        if how == "wait":
            return len(cf.wait(futures).done)
        return [f.result() for f in cf.as_completed(futures)]


    if __name__ == "__main__":
        ctx = multiprocessing.get_context("fork")
        event = ctx.Event()
        release_on_stdin(event.set)
        with cf.ProcessPoolExecutor(1, mp_context=ctx, initializer=init,
                                    initargs=(event,)) as ex:
            print(outcome([ex.submit(work, 1)], sys.argv[1]))  # <-- waits
''')

FORKED = textwrap.dedent('''
    import multiprocessing
    import os
    import time
    from multiprocessing.pool import ThreadPool
    from hang_dump_helpers import release_on_stdin

    ctx = multiprocessing.get_context("fork")
    gate = ctx.Event()


    def blocked():
        gate.wait()  # <-- stuck
        return "released"


    def child():
        with ThreadPool(1) as pool:
            print("child", os.getpid(), pool.apply_async(blocked).get(), flush=True)  # <-- waits


    if __name__ == "__main__":
        print("parent", os.getpid(), flush=True)
        release_on_stdin(gate.set)
        with ThreadPool(1) as pool:
            pool.apply_async(time.sleep, (0.2,)).get()  # the parent's watchdog runs from here
        process = ctx.Process(target=child)
        process.start()
        process.join()
        print("exit code", process.exitcode)
''')

PROGRESS = textwrap.dedent('''
    import concurrent.futures as cf
    import multiprocessing
    import threading
    import time


    def slow(x):
        time.sleep(0.2)
        return x


    if __name__ == "__main__":
        items = list(range(12))  # 2 workers: 1.2 s in all, a result every 0.2 s
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(slow, items, chunksize=1) == items
            assert list(pool.imap(slow, items)) == items
        with cf.ThreadPoolExecutor(2) as ex:
            assert len(cf.wait([ex.submit(slow, x) for x in items]).done) == 12
            assert sorted(f.result() for f in cf.as_completed(
                [ex.submit(slow, x) for x in items])) == items
            assert list(ex.map(slow, items)) == items
            # a long wait in a thread other than the main one is not watched
            waiter = threading.Thread(target=lambda: ex.submit(time.sleep, 1.6).result())
            waiter.start()
            waiter.join()
        print("done")
''')

STATUS = textwrap.dedent('''
    import json
    import concurrent.futures
    import concurrent.futures._base as base
    import multiprocessing.pool as pool
    import os
    import signal
    import mpcompat

    NAMES = ("multiprocessing.hang_dump", "concurrent_futures.hang_dump")
    # What the first Pool would do: apply the patches that wait for the Pool patch's first
    # use (multiprocessing.hang_dump among them: it targets the same modules).
    from mpcompat import patching
    patching.apply_deferred()


    def caught():
        with open("/proc/%d/status" % os.getpid()) as f:
            line = [l for l in f if l.startswith("SigCgt:")][0]
        return bool(int(line.split()[1], 16) >> (signal.SIGURG - 1) & 1)


    def functions():
        return {"wait": pool.ApplyResult.wait, "next": pool.IMapIterator.next,
                "__next__": pool.IMapIterator.__next__, "result": base.Future.result,
                "exception": base.Future.exception, "cf.wait": base.wait,
                "as_completed": base.as_completed, "package.wait": concurrent.futures.wait,
                "package.as_completed": concurrent.futures.as_completed}


    def report():
        states = {p.name: [p.state, p.reason] for p in mpcompat.status().patches
                  if p.name in NAMES}
        funcs = functions()
        return {"states": states, "handler": caught(),
                "stdlib": sorted(k for k, f in funcs.items()
                                 if f.__module__ in ("multiprocessing.pool",
                                                     "concurrent.futures._base")
                                 and not hasattr(f, "__wrapped__"))}


    before = functions()
    out = {"on": report()}
    mpcompat.deactivate()
    out["off"] = report()
    out["restored"] = sorted(k for k, f in functions().items()
                             if f is getattr(before[k], "__wrapped__", before[k]))
    mpcompat.activate()
    out["again"] = report()
    print(json.dumps(out))
''')

ALL = sorted(["wait", "next", "__next__", "result", "exception", "cf.wait", "as_completed",
              "package.wait", "package.as_completed"])

# name -> (script, args, MPCOMPAT_HANG_DUMP or None, worker label or None, worker count)
SCENARIOS = {
    "threadpool": (THREADPOOL, (), "1", None, 0),
    "threadpool-before": (THREADPOOL, (), None, None, 0),
    "pool-fork-map": (POOL, ("fork", "map"), "1", "Pool worker ForkPoolWorker-", 2),
    "pool-spawn-map": (POOL, ("spawn", "map"), "1", "Pool worker SpawnPoolWorker-", 2),
    "pool-spawn-before": (POOL, ("spawn", "map"), None, None, 0),
    "pool-forkserver-imap": (POOL, ("forkserver", "imap"), "1",
                             "Pool worker ForkServerPoolWorker-", 2),
    "future-result": (FUTURES, ("result",), "1", "ForkProcess-", 1),
    "futures-wait": (FUTURES, ("wait",), "1", "ForkProcess-", 1),
    "futures-as_completed": (FUTURES, ("as_completed",), "1", "ForkProcess-", 1),
    "forked-child": (FORKED, (), "1", None, 0),
}


def shown_stuck(err, path, worker_label):
    """The workers shown stuck on the STUCK line, over the complete dumps of ``err``."""
    stuck, done = h.line_of(path, STUCK), h.complete_dumps(err)
    found = set()
    for d in h.dumps(err):
        if d[0] in done:
            found |= h.stuck_workers(d[4], worker_label, path, stuck)
    return found


def ready_for(script_path, worker_label, count=2, workers=0):
    """The test's condition to release a stuck script: ``count`` complete dumps, which have
    shown every worker's stack stuck on its line (when the waiting process has worker
    processes)."""
    def ready(err):
        if len(h.complete_dumps(err)) < count:
            return False
        return worker_label is None or \
            len(shown_stuck(err, script_path, worker_label)) >= workers
    return ready


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every stuck scenario side by side; {name: (met, rc, stdout, stderr, script)}."""
    def release(name, scenario, path):
        hang_dump, label, workers = SCENARIOS[name][2:5]
        if hang_dump is None:
            return scenario.release_when(None, limit=2.5)  # dumps would have come by now
        if name == "forked-child":
            return scenario.release_when(_forked_ready(scenario, path), limit=60)
        # the ThreadPool one waits for a third dump: doubling, not every SECONDS
        count = 3 if name == "threadpool" else 2
        return scenario.release_when(ready_for(path, label, count, workers), limit=60)

    scenarios = {name: spec[:3] for name, spec in SCENARIOS.items()}
    return h.run_side_by_side(tmp_path_factory.mktemp("stuck"), scenarios, release)


def _forked_ready(scenario, path):
    def ready(err):
        lines = scenario.stdout.split()
        if "parent" not in lines:
            return False
        parent = int(lines[lines.index("parent") + 1])
        child = [d for d in h.dumps(err) if d[1] != parent]
        return len(child) >= 2 and len(h.complete_dumps(err)) >= 2
    return ready


def check_dumps(result, what, worker_label=None, workers=0, stuck_in=None):
    """The common checks of a stuck scenario; return its dumps. ``stuck_in``: the function of
    the STUCK line, which the headers name once the dumps show it."""
    met, rc, out, err, path = result
    assert met, err
    assert rc == 0, err  # released, it finished: nothing was killed
    done = h.complete_dumps(err)  # one still being written at the release is left out
    dumps = [d for d in h.dumps(err) if d[0] in done]
    assert len(dumps) >= 2, err
    waits, stuck = h.line_of(path, WAITS), h.line_of(path, STUCK)
    for i, (number, pid, waited, described, section) in enumerate(dumps):
        assert number == i + 1
        assert what in described, described
        # backoff: dump n comes after 2**(n-1) * SECONDS without progress, never sooner
        assert waited >= 2 ** i * 1.0 - 0.05, [d[:3] for d in dumps]
        since = h.SINCE.search(section)
        assert since and since.group(1) == "1", section[:600]
        after = float(since.group(2))  # the next threshold: a power of two above this wait
        assert after >= 2 ** (i + 1) and after > waited and math.log2(after).is_integer()
        assert "end of hang dump %d of process %d" % (number, pid) in section
        # a repeat says what changed, or that nothing did
        assert i == 0 or h.repeat_says_what_changed(section, number), section
        assert "mpcompat/" not in section.replace("mpcompat/demo", ""), section
    # the first dump shows the waiting thread at the user's line, with its source
    stack = h.waiting_stack(dumps[0][4])
    assert 'File "%s", line %d, in ' % (path, waits) in stack, stack
    assert WAITS in stack, stack
    # no flood: the dumps are as many as the doublings that fit in the wait
    longest = dumps[-1][2]
    assert len(dumps) <= int(math.log2(longest)) + 1, [d[:3] for d in dumps]
    last = dumps[-1][4]
    if worker_label is not None:
        # the last dump whose stuck worker answered: one taken as the release arrives may find
        # the worker gone and name the scenario's release thread instead
        last = [d[4] for d in dumps if h.stuck_workers(d[4], worker_label, path, stuck)][-1]
    if stuck_in is not None:
        # the header names the stuck frame, and the stack comes before the waiting thread
        assert "; stuck in %s, line %d, in %s, in " % (path, stuck, stuck_in) in \
            last.splitlines()[0], last.splitlines()[0]
    if worker_label is not None:
        # every worker shown stuck on its line (its own stack, or the same as another's)
        assert len(shown_stuck(err, path, worker_label)) == workers, err
        assert "its threads as it writes them" not in err  # read and ordered by the parent
        shown = [d[4] for d in dumps if h.stuck_workers(d[4], worker_label, path, stuck)][0]
        assert shown.index("most recent call last") < shown.index("(the waiting thread)")
        assert len(shown.splitlines()) <= 40, shown
    return dumps


def test_threadpool_result_dumps_the_waiting_and_the_worker_threads(runs):
    dumps = check_dumps(runs["threadpool"], "a result (ApplyResult job 0 of "
                                            "multiprocessing.pool.ThreadPool with 2 workers)",
                        stuck_in="blocked")
    assert len(dumps) >= 3 and dumps[2][2] >= 3.95, [d[:3] for d in dumps]  # after 1, 2, 4 s
    met, rc, out, err, path = runs["threadpool"]
    assert out.strip() == "released"
    stuck = h.line_of(path, STUCK)
    section = dumps[0][4]
    assert 'File "%s", line %d, in blocked' % (path, stuck) in section
    assert "gate.wait()  " + STUCK in section  # the worker thread's line, with its source
    assert "worker pid" not in err  # ThreadPool workers are threads: no process to signal
    # the stuck thread first, the idle ones one line each
    assert section.index(STUCK) < section.index("(the waiting thread)")
    assert len(section.splitlines()) <= 40, section
    assert "thread Thread-" in section and ": idle, in " in section, section


@pytest.mark.parametrize("name, label, what", [
    ("pool-fork-map", "Pool worker ForkPoolWorker-", "the result of a map (MapResult job"),
    ("pool-spawn-map", "Pool worker SpawnPoolWorker-", "the result of a map (MapResult job"),
    ("pool-forkserver-imap", "Pool worker ForkServerPoolWorker-",
     "the next result of Pool.imap (job"),
])
def test_pool_workers_blocked_on_a_lock_write_their_stacks(runs, name, label, what):
    dumps = check_dumps(runs[name], what, label, workers=2, stuck_in="work")
    assert runs[name][2].strip() == "[0, 2, 4, 6]"
    assert "multiprocessing.pool.Pool with 2 workers" in dumps[0][3]
    if what.startswith("the result of a map"):
        assert "; 4 chunks still to come)" in dumps[0][3]


@pytest.mark.parametrize("name, what", [
    ("future-result", "<Future at 0x"),
    ("futures-wait", "concurrent.futures.wait(return_when=ALL_COMPLETED) on 1 future, 0 done"),
    ("futures-as_completed", "the next future from concurrent.futures.as_completed (0 yielded "
                             "so far)"),
])
def test_a_future_that_never_completes_dumps_the_executor_worker(runs, name, what):
    check_dumps(runs[name], what, "ForkProcess-", workers=1, stuck_in="work")
    assert runs[name][2].strip() in ("2", "1", "[2]")


def test_before_nothing_is_printed(runs):
    for name in ("threadpool-before", "pool-spawn-before"):
        met, rc, out, err, path = runs[name]
        assert rc == 0 and out.strip() in ("released", "[0, 2, 4, 6]"), err
        assert "mpcompat" not in err, err


def test_a_forked_child_watches_its_own_waits(runs):
    met, rc, out, err, path = runs["forked-child"]
    assert met and rc == 0, err
    words = out.split()
    parent, child = int(words[words.index("parent") + 1]), int(words[words.index("child") + 1])
    assert "exit code 0" in out
    assert not h.dumps(err, parent), err  # Process.join is not a watched wait
    dumps = h.dumps(err, child)
    assert len(dumps) >= 2 and dumps[0][0] == 1, err  # the child counts its own dumps
    assert "ThreadPool with 1 worker)" in dumps[0][3]
    assert STUCK in dumps[0][4] and WAITS in h.waiting_stack(dumps[0][4])


def test_progress_resets_the_clock_and_other_threads_are_not_watched(tmp_path):
    path = tmp_path / "progress.py"
    path.write_text(PROGRESS)
    rc, out, err = h.run_to_end(path, "1")
    assert rc == 0 and out.strip() == "done", err
    assert "hang dump" not in err, err


def run_status(hang_dump):
    # (the Pool patch hooks IMapIterator.next too: off, what is wrapped is the hang dump's)
    env = child_env(MPCOMPAT_HANG_DUMP=hang_dump, MPCOMPAT_WARNED=None,
                    MPCOMPAT_DISABLED_PATCHES="multiprocessing.pool_workers")
    proc = subprocess.run([sys.executable, "-c", STATUS], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_unset_the_patches_are_not_needed_and_wrap_nothing():
    out, err = run_status(None)
    for when in ("on", "off", "again"):
        assert out[when]["stdlib"] == ALL and not out[when]["handler"]
    for state, reason in out["on"]["states"].values():
        assert (state, reason) == ("not needed", "MPCOMPAT_HANG_DUMP is not set")
    assert "mpcompat" not in err


def test_set_the_patches_apply_and_revert_to_the_originals():
    out, err = run_status("1")
    assert out["on"]["stdlib"] == [] and out["on"]["handler"]
    assert all(s == ["applied", "on " + t] for s, t in zip(
        [out["on"]["states"][n] for n in sorted(out["on"]["states"])],
        ["concurrent.futures._base", "multiprocessing.pool, multiprocessing.process"]))
    assert out["off"]["stdlib"] == ALL and out["restored"] == ALL
    assert not out["off"]["handler"]  # SIGURG is back to its default (ignored)
    assert out["again"]["stdlib"] == [] and out["again"]["handler"]
    assert "mpcompat" not in err


@pytest.mark.parametrize("value", ["abc", "0", "-3", "inf"])
def test_a_bad_value_warns_once_and_stays_off(value):
    out, err = run_status(value)
    assert out["on"]["stdlib"] == ALL and not out["on"]["handler"]
    for state, reason in out["on"]["states"].values():
        assert state == "not needed"
        assert reason == "MPCOMPAT_HANG_DUMP=%r is not a positive number" % value
    warnings = [l for l in err.splitlines() if "MpcompatWarning" in l]
    assert len(warnings) == 1, err
    assert ("MPCOMPAT_HANG_DUMP=%r is not a number of seconds: expected a positive number, "
            "e.g. MPCOMPAT_HANG_DUMP=300" % value) in warnings[0]


FUTURE_CYCLE = textwrap.dedent("""
    import concurrent.futures, gc, json, threading, weakref
    import mpcompat
    gc.disable()
    freed = {}
    for name in ("result", "exception"):
        future = concurrent.futures.Future()
        timer = threading.Timer(0.3, future.set_exception, (ValueError("late"),))
        timer.start()
        try:
            getattr(future, name)()  # pending: a watched wait
        except ValueError:
            pass
        timer.join()
        ref = weakref.ref(future)
        del future, timer
        freed[name] = ref() is None
    state = [p.state for p in mpcompat.status().patches
             if p.name == "concurrent_futures.hang_dump"]
    print(json.dumps({"freed": freed, "state": state}))
""")


def test_a_watched_future_is_not_kept_alive_by_its_own_exception():
    """Future.result() drops its frames' references so that the exception it raises (kept by
    the future) does not tie the future to itself; the watched wait does the same."""
    proc = subprocess.run([sys.executable, "-c", FUTURE_CYCLE],
                          env=child_env(MPCOMPAT_HANG_DUMP="60"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"freed": {"result": True, "exception": True}, "state": ["applied"]}


SLOW_START = '''\
import multiprocessing, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slowstart_11 import work

if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(pool.map(work, [1]))
'''


def test_workers_still_importing_are_starting_not_stuck(tmp_path):
    """A spawn worker that imports for seconds (here 12 modules of 0.3 s each, as a worker
    loading torch does) is starting, not stuck: no dump while its stacks are imports that
    change; the dump comes once it is stuck in the task."""
    for i in range(12):  # slowstart_11, where work is, imports slowstart_10, ... slowstart_0
        (tmp_path / ("slowstart_%d.py" % i)).write_text(
            "import time\ntime.sleep(0.3)\n" + ("import slowstart_%d\n" % (i - 1) if i else "")
            + ("def work(x):\n    time.sleep(3)  # STUCK\n    return x\n" if i == 11 else ""))
    path = tmp_path / "slow_start.py"
    path.write_text(SLOW_START)
    rc, out, err = h.run_to_end(path, "1", timeout=120)
    assert rc == 0 and out.strip() == "[1]", err
    found = h.dumps(err)
    assert found, err  # stuck in work() for 3 s
    assert "): importing, " not in err, err  # no dump while the worker imported
    assert "slowstart_11.py\", line 5, in work" in found[0][4], found[0][4]
