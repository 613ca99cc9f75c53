"""A plain ``multiprocessing.Process`` that dies of a native crash is named when the parent joins
it (issue 25: "a plain Process that failed"), with the stack at the crash; one the parent ends
itself (``terminate()``, ``kill()``) says nothing. Each scenario runs in a fresh interpreter."""
import pytest

from crash_helpers import crash_line
from pool_workers_helpers import flat, run_script

SCENARIO = '''\
import multiprocessing, sys, time, warnings
import mpcompat
from crash_helpers import segfault
from pool_workers_helpers import report

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    data = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        crashed = ctx.Process(target=segfault, args=(sys.argv[2],))
        crashed.start()
        crashed.join(60)  # the warning's line
        ended = [ctx.Process(target=time.sleep, args=(60,)) for _ in range(2)]
        for p in ended:
            p.start()
        ended[0].terminate()
        ended[1].kill()
        for p in ended:
            p.join(60)
    data["codes"] = [crashed.exitcode] + [p.exitcode for p in ended]
    data["warnings"] = [str(w.message) for w in caught]
    data["at"] = [[w.filename, w.lineno] for w in caught]
    report(data)
'''


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_crashed_process_is_named_and_an_ended_one_is_not(method, tmp_path):
    data, proc = run_script(tmp_path, SCENARIO, method, str(tmp_path / "pid"), timeout=120)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["codes"] == [-11, -15, -9], data
    assert len(data["warnings"]) == 1, data["warnings"]  # terminate() and kill(): nothing
    # said at the user's join(), not at the standard library's line that called mpcompat's
    assert data["at"] == [[str(tmp_path / "scenario.py"), SCENARIO.splitlines().index(
        "        crashed.join(60)  # the warning's line") + 1]], data["at"]
    text = flat(data["warnings"][0])
    path, line = crash_line()
    assert "was killed by signal 11 (SIGSEGV). SIGSEGV is a crash in native code" in text, text
    assert "It crashed in segfault() at %s:%d" % (path, line) in text, text
