"""Issue 33: every cause is said once, and no sentence of the output is contradicted by it.

A spawn or forkserver Pool in a script without a main guard: its workers print nothing, the
error its wait raises names the cause once (it was said by every worker, then twice in the
parent); a Pool nobody waits on says it on one line as it ends. A plain Process that fails while
starting says its parent reports it: the parent does, once, even if it never joins it (as it
sees it ended, at the latest as it exits). Standard library only; each script runs in a child
as an installed mpcompat would run it."""
import sys

import pytest

from one_report_helpers import first_index, own_lines, run_user_script

NO_GUARD = '''\
import multiprocessing as mp, sys
def square(x): return x * x
ctx = mp.get_context(sys.argv[1])
pool = ctx.Pool(4)
print(pool.map(square, range(8)))
'''

# Nobody waits on it: the task's result fails, and nothing raises its error.
NOBODY_WAITS = '''\
import multiprocessing as mp, sys
def square(x): return x * x
pool = mp.get_context(sys.argv[1]).Pool(2)
result = pool.apply_async(square, (3,))
result.wait(60)
print("END", result.ready(), flush=True)
'''

CAUSE = "script.py, line 4 starts a new process"
BOOTSTRAP = "finished its bootstrapping phase"
# Python 3.14's forkserver imports the main module when it starts, and dies of the missing guard
# itself (tests/one_report/test_one_report_pool.py); 3.15 ignores that error.
FORKSERVER_DIES_OF_MAIN = sys.version_info[:2] == (3, 14)


def _skip_dying_forkserver(method):
    if method == "forkserver" and FORKSERVER_DIES_OF_MAIN:
        pytest.skip("the forkserver itself dies of the missing guard on Python 3.14")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_no_main_guard_pool_says_its_cause_once_and_its_workers_nothing(method, tmp_path):
    _skip_dying_forkserver(method)
    code, lines = run_user_script(tmp_path, NO_GUARD, method, timeout=120)
    text = "\n".join(lines)
    assert code == 1, text
    # no worker's line: each said the cause, then "its parent process reports it once"
    assert not [line for line in lines if line.startswith("mpcompat: this process")], text
    assert "reports it once" not in text, text
    assert text.count(CAUSE) == 1 and text.count(BOOTSTRAP) == 1, text
    # the fix, once: the note's first line says it, then shows the guarded code
    assert text.count('if __name__ == "__main__"') == 2, text
    assert text.count("Traceback (most recent call last)") == 1, text
    line = first_index(lines, "BrokenPool: a worker process of this Pool failed while starting")
    assert line is not None and lines[line + 1].startswith("mpcompat: Pool worker process (pid "), \
        text
    # no worker killed half-way through its start as the Pool ends (the resource tracker
    # warned of the semaphores it had made)
    assert "resource_tracker" not in text, text
    assert len(lines) <= 24 and own_lines(lines) == [], text


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_no_main_guard_pool_nobody_waits_on_says_it_once_as_it_ends(method, tmp_path):
    _skip_dying_forkserver(method)
    code, lines = run_user_script(tmp_path, NOBODY_WAITS, method, timeout=120)
    text = "\n".join(lines)
    assert code == 0 and "END True" in lines, text
    said = [line for line in lines if "failed while starting" in line]
    assert len(said) == 1, text
    assert lines.index(said[0]) > lines.index("END True"), text  # as the Pool ends, at exit
    assert said[0].startswith("mpcompat: Pool worker process "), text
    assert ("RuntimeError: An attempt has been made to start a new process before the current "
            "process has finished its bootstrapping phase. (script.py, line 3 starts a new "
            "process while this process is still importing the main module to start up: put "
            "it under `if __name__ == \"__main__\":`); the Pool broke at once (no new worker "
            "could start), and nothing raised its BrokenPool") in said[0].replace(
                str(tmp_path) + "/", ""), text
    assert "Traceback" not in text and "reports it once" not in text, text


def test_a_pool_whose_error_was_raised_says_nothing_more_as_it_ends(tmp_path):
    source = NOBODY_WAITS.replace("result.wait(60)\n", "try:\n    result.get(60)\nexcept "
                                  "Exception as exc:\n    print('GOT', type(exc).__name__)\n")
    code, lines = run_user_script(tmp_path, source, "spawn", timeout=120)
    text = "\n".join(lines)
    assert code == 0 and "GOT BrokenPool" in lines and "END True" in lines, text
    assert "failed while starting" not in text, text


UNJOINED = '''\
import multiprocessing as mp, sys, time
from multiprocessing.connection import wait

if __name__ == "__main__":
    def work():
        pass

    process = mp.get_context(sys.argv[1]).Process(target=work, daemon=sys.argv[2] == "daemon")
    process.start()
    wait([process.sentinel], 60)  # ended: neither joined nor polled
    print("PARENT DONE", flush=True)
'''

POLLED = '''\
import multiprocessing as mp, sys, time

if __name__ == "__main__":
    def work():
        pass

    process = mp.get_context(sys.argv[1]).Process(target=work)
    process.start()
    while process.is_alive():
        time.sleep(0.02)
    print("POLLED", flush=True)
    process.join()
    print("JOINED", flush=True)
'''


def _parent_warning(lines):
    """The indexes of the lines of the parent's warnings on its first Process."""
    return [i for i, line in enumerate(lines)
            if "MpcompatWarning: mpcompat: Process 'SpawnProcess-1' (pid " in line]


@pytest.mark.parametrize("daemon", ["daemon", "plain"])
def test_a_process_never_joined_is_reported_by_its_parent_as_it_exits(daemon, tmp_path):
    code, lines = run_user_script(tmp_path, UNJOINED, "spawn", daemon, timeout=120,
                                  PYTHONUNBUFFERED="1")
    text = "\n".join(lines)
    assert code == 0 and "PARENT DONE" in lines, text
    # the child prints nothing; its parent says it once, as it exits, at the line that started it
    assert not any(line.startswith("mpcompat: this process (pid ") for line in lines), text
    warned = _parent_warning(lines)
    assert len(warned) == 1 and warned[0] > lines.index("PARENT DONE"), text  # at its exit
    assert "script.py:9: MpcompatWarning: " in lines[warned[0]], text
    assert "failed while starting: AttributeError: " in lines[warned[0]], text
    assert "function work is defined inside `if __name__ == \"__main__\":`" in text, text
    assert lines[-1].strip() == "process.start()", text
    assert text.count("failed while starting") == 1, text


def test_a_process_polled_with_is_alive_is_reported_as_its_end_is_seen(tmp_path):
    code, lines = run_user_script(tmp_path, POLLED, "spawn", timeout=120, PYTHONUNBUFFERED="1")
    text = "\n".join(lines)
    assert code == 0 and "POLLED" in lines and "JOINED" in lines, text
    warned = _parent_warning(lines)
    assert len(warned) == 1 and warned[0] < lines.index("POLLED"), text  # not again at join()


EXIT_LINE = '''\
import multiprocessing as mp, sys
from multiprocessing.connection import wait

if __name__ == "__main__":
    def work():
        pass

    process = mp.get_context("spawn").Process(target=work)
    process.start()
    wait([process.sentinel], 60)
    process._popen.wait(10)  # reaped, neither joined nor polled: its record is still untaken
    from mpcompat.child_failures import channel, exits
    print("EXIT", exits.exit_cause(process.exitcode, None, process.pid), flush=True)
    print("TAKEN", channel.take(process.pid) is not None, flush=True)
'''


def test_the_exit_code_line_says_no_traceback_of_a_child_that_sent_its_error(tmp_path):
    """A report that names the child's record apart (a DataLoader's) read "its traceback is on
    the worker's stderr": the child had printed one line, or nothing."""
    code, lines = run_user_script(tmp_path, EXIT_LINE, timeout=120, PYTHONUNBUFFERED="1")
    text = "\n".join(lines)
    assert code == 0, text
    assert "EXIT [\"Exit code 1: an exception nobody caught ended it (Python's exit code for " \
        "that).\"]" in lines, text
    assert "TAKEN True" in lines, text  # peeked, not taken: the report takes it
