"""Issue 26, item 1: a start-up failure that every worker of a Pool shares is told once, by the
parent, in one screen with the cause first; each worker prints at most one line pointing there.
Errors that no new worker can pass (no main guard, a name missing in the main module) break the
Pool at the first record; a failing initializer keeps its grace period. Issue 26, item 2: no
line of what the user reads names a file of mpcompat. Standard library only; each script runs
in a child as an installed mpcompat would run it."""
import sys

import pytest

from one_report_helpers import first_index, own_lines, run_user_script

# The five lines, with the start method as the argument.
NO_GUARD = '''\
import multiprocessing as mp, sys
def square(x): return x * x
ctx = mp.get_context(sys.argv[1])
with ctx.Pool(2) as pool:
    print(pool.map(square, range(8)))
'''

INITIALIZER = '''\
import multiprocessing as mp, sys

def open_db(path):
    with open(path, "rb"):
        pass

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2, initializer=open_db,
                                          initargs=("/nonexistent/db.sqlite",)) as pool:
        print(pool.map(square, range(8)))
'''

GUARDED_INITIALIZER = '''\
import multiprocessing as mp, sys, time

def square(x):
    return x * x

if __name__ == "__main__":
    def setup():
        pass
    start = time.time()
    try:
        with mp.get_context(sys.argv[1]).Pool(2, initializer=setup) as pool:
            pool.map(square, range(8))
    except Exception as exc:
        print("SECONDS %.2f %s" % (time.time() - start, type(exc).__name__))
'''

# A broken Pool refuses a new task: mpcompat's check raises the BrokenPool, uncaught.
REFUSED = GUARDED_INITIALIZER.replace('''    start = time.time()
    try:
        with mp.get_context(sys.argv[1]).Pool(2, initializer=setup) as pool:
            pool.map(square, range(8))
    except Exception as exc:
        print("SECONDS %.2f %s" % (time.time() - start, type(exc).__name__))
''', '''    pool = mp.get_context(sys.argv[1]).Pool(2, initializer=setup)
    try:
        pool.map(square, range(8))
    except Exception as exc:
        print("MAP", type(exc).__name__)
    pool.apply_async(square, (1,))
''')

# Python 3.14's forkserver imports the main module when it starts, and dies of the missing
# guard itself (tests/pool_workers/test_pool_failfast.py); 3.15 ignores that error.
FORKSERVER_DIES_OF_MAIN = sys.version_info[:2] == (3, 14)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_no_main_guard_is_one_screen_with_the_line_and_the_fix_first(method, tmp_path):
    code, lines = run_user_script(tmp_path, NO_GUARD, method, timeout=120)
    text = "\n".join(lines)
    assert code == 1, text
    line = first_index(lines, "script.py, line 4 starts a new process")
    assert line is not None and line < 15, text
    assert 'put it under `if __name__ == "__main__":`' in lines[line], text
    assert len(lines) <= 40, text
    assert own_lines(lines) == [], text
    if method == "forkserver" and FORKSERVER_DIES_OF_MAIN:
        # the forkserver itself dies of it: one line, no traceback of its own; the parent's
        # traceback (a ConnectionResetError raised in Pool()) keeps the user's frames and
        # Pool()'s, not the connection's mechanics the note explains (it was 55 lines)
        assert lines[0].startswith("mpcompat: the forkserver process (pid "), text
        assert text.count("Traceback (most recent call last)") == 1, text
        assert "answer_challenge" not in text and "Put the code that starts processes under " \
            "`if __name__ == \"__main__\":`." in text.replace("\n", " "), text
        return
    # broken at the first record: one worker named, no grace period
    assert "BrokenPool: a worker process of this Pool failed while starting (pid " in text, text
    # each worker: one line, no traceback; the parent's traceback is the only one
    assert text.count("Traceback (most recent call last)") == 1, text
    assert text.count("bootstrapping phase") <= 3, text


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_failing_initializer_is_one_screen_with_the_cause_first(method, tmp_path):
    code, lines = run_user_script(tmp_path, INITIALIZER, method, timeout=120)
    text = "\n".join(lines)
    assert code == 1, text
    assert len(lines) <= 40, text
    assert own_lines(lines) == [], text
    cause = first_index(lines, "FileNotFoundError: [Errno 2] No such file or directory")
    assert cause is not None and cause < 15, text
    assert "script.py, line 4, in open_db" in lines[cause], text
    assert text.count("Traceback (most recent call last)") == 1, text
    # the grace period stays: several workers failed before the Pool broke
    assert "worker processes of this Pool failed while starting, in a row for 3." in text, text


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_initializer_defined_under_the_guard_breaks_the_pool_at_once(method, tmp_path):
    code, lines = run_user_script(tmp_path, GUARDED_INITIALIZER, method, timeout=120)
    text = "\n".join(lines)
    seconds = [line.split() for line in lines if line.startswith("SECONDS ")]
    assert code == 0 and len(seconds) == 1 and seconds[0][2] == "BrokenPool", text
    assert float(seconds[0][1]) < 3.0, text  # less than the grace period (3 s)
    assert text.count("Traceback (most recent call last)") == 0, text
    assert own_lines(lines) == [], text


def test_a_broken_pool_refusing_a_task_names_no_frame_of_mpcompat(tmp_path):
    """The BrokenPool raised as a broken Pool refuses a task (``apply_async``, ``map``,
    ``with pool``) comes from mpcompat's check: its traceback, printed uncaught, keeps the
    user's line and none of mpcompat's (before Python 3.11, the excepthook leaves them out)."""
    code, lines = run_user_script(tmp_path, REFUSED, "spawn", timeout=120)
    text = "\n".join(lines)
    assert code == 1 and "MAP BrokenPool" in lines, text
    assert "mpcompat.errors.BrokenPool: a worker process of this Pool failed while starting" \
        in text, text
    assert 'script.py", line 14, in <module>' in text, text
    assert own_lines(lines) == [], text


def test_a_worker_without_a_channel_prints_its_traceback_without_mpcompat_frames(tmp_path):
    code, lines = run_user_script(
        tmp_path, INITIALIZER, "fork", timeout=120,
        MPCOMPAT_DISABLED_PATCHES="multiprocessing.failure_records")
    text = "\n".join(lines)
    assert text.count("Traceback (most recent call last)") >= 2, text  # the workers' own
    assert 'script.py", line 4, in open_db' in text, text
    assert own_lines(lines) == [], text
