"""Patch ``concurrent_futures.process_workers``: a ProcessPoolExecutor broken by a dead worker
names the worker's pid, its exit code or signal with the likely cause, and the worker's own
recorded error (a task it could not unpickle: the main-guard note). Python 3.8 has no hook
for it: there the patch is "not needed" and the error stays CPython's. Each scenario runs in
a child bounded by a timeout."""
import sys

import pytest

from pool_workers_helpers import flat, run_script
from testenv import missing_in_main

PATCH = "concurrent_futures.process_workers"
HOOKED = sys.version_info >= (3, 9)

SCENARIO = '''\
import concurrent.futures as cf, multiprocessing, sys, traceback
import mpcompat
from pool_workers_helpers import die, report

if __name__ == "__main__":
    class Guarded(object):  # under the main guard: spawn/forkserver workers cannot unpickle it
        pass

    method = sys.argv[1]
    data = {}
    cases = [("SIGKILL", die, "SIGKILL"), ("SIGSEGV", die, "SIGSEGV"), ("exit3", die, "exit3")]
    if method != "fork":
        cases.append(("unpicklable", str, Guarded()))
    for name, func, arg in cases:
        with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method)) as ex:
            try:
                ex.submit(func, arg).result(60)
                data[name] = "no error"
            except BaseException as exc:
                data[name] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    data["state"] = {p.name: p.state for p in mpcompat.status().patches}[%r]
    report(data)
''' % PATCH


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_broken_process_pool_names_the_dead_worker(method, tmp_path):
    data, proc = run_script(tmp_path, SCENARIO, method, timeout=240)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    expected = {"SIGKILL": ("killed by signal 9 (SIGKILL)", "journalctl -k"),
                "SIGSEGV": ("killed by signal 11 (SIGSEGV)", "PYTHONFAULTHANDLER=1"),
                "exit3": ("exit code 3", "")}
    if method != "fork":
        expected["unpicklable"] = (
            "exit code 1", "Its own error: AttributeError: " + missing_in_main("Guarded"))
    for name, (how, hint) in expected.items():
        text = flat(data[name])
        assert "BrokenProcessPool: A process in the process pool was terminated abruptly" in text
        if not HOOKED:
            assert "mpcompat" not in text
            continue
        assert "mpcompat: ProcessPoolExecutor worker process " in text and \
            " ended: %s." % how in text, (name, text)
        assert hint in text, (name, text)
    if HOOKED and method != "fork":
        text = flat(data["unpicklable"])
        assert "(while unpickling a task its parent sent)" in text
        assert 'class Guarded is defined inside `if __name__ == "__main__":`' in text
    assert data["state"] == ("applied" if HOOKED else "not needed")
