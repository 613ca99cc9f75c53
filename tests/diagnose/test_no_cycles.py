"""A pickling error that mpcompat explains leaves no reference cycle: once the executor, queue,
Pool or process is done with and dropped, what the error's frames held (the executor's call
queue and its semaphores, the queue's semaphores, the object that failed) is freed at once, by
reference counting alone, as without mpcompat.

The scenario runs in a fresh interpreter with the garbage collector disabled, once with mpcompat
and once without (the baseline, which must be clean for the comparison to mean anything).
Before the fix the explanation kept on the error held the error (and the walker's exceptions,
their frames), so CPython's own test_concurrent_futures printed "leaked semaphore objects".
"""
import pytest

from pool_workers_helpers import run_script

SCENARIO = '''\
import gc
gc.disable()
import concurrent.futures, multiprocessing, sys, threading, types, weakref
import mpcompat
from mpcompat.diagnose.notes import explanation_of
from pool_workers_helpers import report


def make_local():
    class Local(object):
        pass
    return Local()


class Unpicklable(object):
    """Fails on its lock; holds an instance of a local class (its class cannot be pickled
    either: the walker keeps that class's error while it walks)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.local = make_local()


def noted(exc):
    report = explanation_of(exc)
    return report is not None and not report.ok


def executor(bad):
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    try:
        pool.submit(len, bad).result(60)
    except TypeError as exc:
        found = noted(exc)
    refs = [weakref.ref(pool._call_queue), weakref.ref(pool._call_queue._sem)]
    pool.shutdown()
    return found, refs


def queue(bad):
    q = multiprocessing.get_context("fork").Queue()
    q.put(bad)  # the feeder thread fails on it, prints the error and goes on
    q.put(1)
    assert q.get(timeout=60) == 1
    refs = [weakref.ref(q._sem), weakref.ref(q._notempty)]
    q.close()
    q.join_thread()
    return None, refs


def pool_map(bad):
    pool = multiprocessing.get_context("fork").Pool(1)
    result = pool.map_async(len, [bad])  # get() would make a cycle of CPython's own
    result.wait(60)
    found = noted(result._value)
    del result
    pool.terminate()
    pool.join()
    return found, []


def process(bad):
    child = multiprocessing.get_context("spawn").Process(target=len, args=(bad,))
    try:
        child.start()
    except TypeError as exc:
        found = noted(exc)
    return found, [weakref.ref(child)]


def running_frames():
    ids = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            ids.add(id(frame))
            frame = frame.f_back
    return ids


def leftovers():
    """Exceptions, frames and objects of mpcompat.diagnose still in memory (gc is off, so
    what a cycle holds stays here until gc.collect())."""
    running, found = running_frames(), []
    for obj in gc.get_objects():
        if isinstance(obj, BaseException):
            found.append(type(obj).__name__)
        elif isinstance(obj, types.FrameType) and id(obj) not in running:
            found.append("frame " + obj.f_code.co_name)
        elif type(obj).__module__.startswith("mpcompat.diagnose"):
            found.append(type(obj).__name__)
    return found


if __name__ == "__main__":
    data = {}
    for case in (executor, queue, pool_map, process):
        bad = Unpicklable()
        found, refs = case(bad)
        refs.append(weakref.ref(bad))
        del bad
        data[case.__name__] = {"noted": found, "alive": [ref() is not None for ref in refs],
                               "leftovers": leftovers()}
        gc.collect()  # what one case leaks must not show in the next
    report(data)
'''
CASES = ["executor", "queue", "pool_map", "process"]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """The scenario's report without mpcompat (checked clean), and with it."""
    tmp = tmp_path_factory.mktemp("cycles")
    off, proc = run_script(tmp, SCENARIO, timeout=120, MPCOMPAT_DISABLE="1")
    assert off is not None and proc.returncode == 0, proc.stderr[-3000:]
    for case in CASES:
        assert not any(off[case]["alive"]) and off[case]["leftovers"] == [], (case, off[case])
    on, proc = run_script(tmp, SCENARIO, timeout=120)
    assert on is not None and proc.returncode == 0, proc.stderr[-3000:]
    return off, on


@pytest.mark.parametrize("case", CASES)
def test_nothing_outlives_an_explained_pickling_error(outcomes, case):
    off, on = outcomes
    # queue: its error stays in the feeder thread; pool_map: the Pool notes its error when get()
    # raises it in the user's thread, which the case does not call (a cycle of CPython's own)
    if case not in ("queue", "pool_map"):
        assert on[case]["noted"] is True and off[case]["noted"] is False
    assert on[case]["alive"] == off[case]["alive"], "kept alive: %r" % (on[case],)
    assert on[case]["leftovers"] == [], on[case]
