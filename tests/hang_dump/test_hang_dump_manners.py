"""With ``MPCOMPAT_HANG_DUMP`` set, the hang-dump hooks leave no trace that CPython's own test
suites see: ``as_completed`` keeps no reference to a future it yielded, and the watchdog thread
stops once the main thread waits for nothing."""
import textwrap

from testenv import child_env, run_python

FREED = textwrap.dedent("""
    import gc, weakref
    import concurrent.futures as cf
    from concurrent.futures._base import CANCELLED_AND_NOTIFIED, FINISHED, Future
    import mpcompat

    def made(state, result=None):
        f = Future()
        f._state, f._result = state, result
        return f

    freed = []
    for timeout in (0, 5):
        # the only references: this list and as_completed's (finished futures come first)
        futures = [made(CANCELLED_AND_NOTIFIED), made(FINISHED, 42)] + [Future() for _ in range(3)]
        try:
            for future in cf.as_completed(futures, timeout=timeout):
                futures.remove(future)
                ref = weakref.ref(future)
                del future
                gc.collect()
                freed.append(ref() is None)
                if len(freed) % 2 == 0:
                    break
        except cf.TimeoutError:
            pass
    states = {p.name: p.state for p in mpcompat.status().patches}
    print(freed, states["concurrent_futures.hang_dump"])
""")


def test_as_completed_keeps_no_yielded_future():
    proc = run_python(FREED, env=child_env(MPCOMPAT_HANG_DUMP="30"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[True,", "True,", "True,", "True]", "applied"]


THREADS = textwrap.dedent("""
    import _thread, threading, time
    import concurrent.futures as cf
    import mpcompat

    def threads():  # bare threads too (the watchdog is one), but the main thread
        return _thread._count()

    seen = []
    with cf.ThreadPoolExecutor(1) as pool:
        def look():
            time.sleep(0.3)
            seen.append(threads())
            time.sleep(0.2)
        pool.submit(look).result()  # a watched wait of the main thread
        time.sleep(0.5)
        after = threads()
        pool.submit(look).result()  # the next wait starts the watchdog again
        time.sleep(0.5)
        final = threads()
    print(seen, after, final, [t.name for t in threading._dangling if t.name.startswith("mpcompat")])
""")


def test_the_watchdog_thread_stops_when_nothing_is_watched():
    proc = run_python(THREADS, env=child_env(MPCOMPAT_HANG_DUMP="30"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The pool's thread and the watchdog while watched, the pool's thread alone after; the
    # watchdog is never a threading.Thread (test harnesses compare threading._dangling).
    assert proc.stdout.strip() == "[2, 2] 1 1 []", proc.stdout
