"""Issue 26, item 3: a hang dump a person can read. The issue's Pool(2).map stuck in the
user's wait_for_lock_file: each dump is at most 40 lines, names the stuck frame in its header
and shows it within its first 10 lines, before the waiting thread; the Pool's idle helper
threads take one line each; a repeat dump says that nothing changed; no line names a file of
mpcompat (item 2). Issue 26, item 2: an error a watched wait raises keeps no frame of
mpcompat's wrappers (Python 3.11+). Standard library only."""
import re

import pytest

from one_report_helpers import own_lines, run_user_script

# The script creates the lock file itself after 4.5 s: dumps after 1, 2 and 4 s. The worker
# sleeps 0.5 s between checks so that a dump almost never samples it inside os.path.exists: a
# stack that really changed must say so, and the test needs one that did not.
POOL_MAP = '''\
import multiprocessing as mp
import os
import sys
import threading
import time

def square(x):
    return x * x

def wait_for_lock_file(x):
    path = sys.argv[2]
    while not os.path.exists(path):
        time.sleep(0.5)  # line 13
    return x

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as pool:
        print(pool.map(square, range(4)))
        threading.Timer(4.5, open, (sys.argv[2], "w")).start()
        print(pool.map(wait_for_lock_file, range(4)))  # the wait
'''

HEADER = re.compile(r"^mpcompat: hang dump (\d+) of process \d+: ")
END = re.compile(r"^mpcompat: end of hang dump (\d+) of process \d+$")


def dumps_of(lines):
    """The dumps in ``lines``, each a list of its lines (header to end line)."""
    found, current = [], None
    for line in lines:
        if HEADER.match(line):
            current = [line]
        elif current is not None:
            current.append(line)
            if END.match(line):
                found.append(current)
                current = None
    return found


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_map_dump_is_a_screenful_with_the_stuck_frame_first(method, tmp_path):
    code, lines = run_user_script(tmp_path, POOL_MAP, method, str(tmp_path / "lock"),
                                  timeout=120, MPCOMPAT_HANG_DUMP="1")
    text = "\n".join(lines)
    assert code == 0 and "[0, 1, 2, 3]" in lines, text
    assert own_lines(lines) == [], text
    dumps = dumps_of(lines)
    assert len(dumps) >= 2, text
    stuck = 'script.py", line 13, in wait_for_lock_file'
    shown = [d for d in dumps if any(stuck in line for line in d)]
    assert shown, text
    for dump in dumps:
        assert len(dump) <= 40, "\n".join(dump)
    first = shown[0]
    assert "; stuck in %s, line 13, in wait_for_lock_file, in worker pid " % (
        tmp_path / "script.py") in first[0], first[0]
    at = [i for i, line in enumerate(first) if stuck in line][0]
    waiting = [i for i, line in enumerate(first) if "(the waiting thread)" in line]
    assert at < 10 and (not waiting or at < waiting[0]), "\n".join(first)
    # both workers stuck alike: one stack, then one line
    assert sum("the same stack as worker pid" in line for line in first) == 1, "\n".join(first)
    # the Pool's three handler threads, idle: one line each
    assert sum(": idle, in pool.py" in line and line.startswith("mpcompat: thread ")
               for line in dumps[0]) == 3, "\n".join(dumps[0])
    # a repeat dump says what changed, or that nothing did
    repeat = dumps[dumps.index(first) + 1:]
    assert repeat and all(
        any(line.startswith(("mpcompat: nothing changed since hang dump ",
                             "mpcompat: changed since hang dump ")) for line in d)
        for d in repeat), text
    assert any("nothing changed since hang dump" in line for d in repeat for line in d), text


FUTURE_ERROR = '''\
import concurrent.futures as cf
import multiprocessing as mp

def fail(x):
    raise ValueError("no such key: %r" % (x,))

if __name__ == "__main__":
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as ex:
        ex.submit(fail, 3).result()
'''


def test_an_error_raised_through_a_watched_wait_has_no_frame_of_mpcompat(tmp_path):
    """Python 3.11+: the wrapper's re-raise leaves its frames out; before, a re-raise restores
    the traceback it caught, and sys.excepthook leaves them out as it prints the error."""
    code, lines = run_user_script(tmp_path, FUTURE_ERROR, timeout=120,
                                  MPCOMPAT_HANG_DUMP="30")
    text = "\n".join(lines)
    assert code == 1 and "ValueError: no such key: 3" in text, text
    assert 'script.py", line 9, in <module>' in text, text
    assert own_lines(lines) == [], text
