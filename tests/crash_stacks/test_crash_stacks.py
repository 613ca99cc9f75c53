"""A worker that crashes in native code (a real SIGSEGV: ``ctypes.string_at(0)``) in a Pool task
or a ProcessPoolExecutor task: its parent learns the worker's Python stack at the crash, the
user's crashing line named first, with no frame of mpcompat's, and the user set nothing
(the crash files of the ``failure_records`` patch). With the program's own
faulthandler on (``PYTHONFAULTHANDLER=1``) its dump to the worker's stderr still happens, and
the parent says where the stack went. No crash file outlives what it is for. Each scenario runs
in a fresh child bounded by a timeout."""
import os
import sys

import pytest

from crash_helpers import crash_line
from pool_workers_helpers import run_script

METHODS = ["fork", "spawn", "forkserver"]

SCENARIO = '''\
import concurrent.futures, multiprocessing, os, sys
import mpcompat
from crash_helpers import crash_report, segfault
from pool_workers_helpers import report


def crash(kind, method, pid_file):
    ctx = multiprocessing.get_context(method)
    try:
        if kind == "pool":
            with ctx.Pool(1) as pool:
                pool.apply(segfault, (pid_file,))
        else:
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as ex:
                ex.submit(segfault, pid_file).result()
    except Exception as exc:
        return crash_report(exc, pid_file)
    return {"error": "no error"}


if __name__ == "__main__":
    report(crash(sys.argv[1], sys.argv[2], "%s-%s.pid" % (sys.argv[1], sys.argv[2])))
'''


def _stack_block(text):
    """The lines of the crash's stack as mpcompat shows it: from "It crashed in" on."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "It crashed in " in line), None)
    if start is None:
        return []
    block = lines[start:start + 2]
    for line in lines[start + 2:]:
        if not line.startswith('  File "') and not line.startswith("  ..."):
            break
        block.append(line)
    return block


def _shown(data):
    """The error the user reads and what ``crash_lines`` still held: where the stack is shown."""
    return data["error"] + "\n" + "\n".join(data["lines"])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["pool", "executor"])
def test_crash_names_the_users_line(tmp_path, kind, method):
    data, proc = run_script(tmp_path, SCENARIO, kind, method, timeout=120)
    assert data is not None, proc.stderr
    path, line = crash_line()
    block = _stack_block(_shown(data))
    assert block, _shown(data)
    # The user's line first, with its text; then the stack, innermost first.
    assert block[0] == "It crashed in segfault() at %s:%d: `%s`." % (
        path, line, "ctypes.string_at(0)  # CRASH LINE"), block
    assert block[1].startswith("Its Python stack at the crash"), block
    assert '  File "%s", line %d in segfault' % (path, line) in block, block
    mpcompat_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "mpcompat") + os.sep
    assert not [b for b in block if mpcompat_dir in b], block
    # Shown once: what the error's report read is gone.
    assert _shown(data).count("It crashed in ") == 1, _shown(data)
    assert data["left"] == [], data["left"]


@pytest.mark.parametrize("method", METHODS)
def test_programs_own_faulthandler_still_writes(tmp_path, method):
    data, proc = run_script(tmp_path, SCENARIO, "pool", method, timeout=120,
                            PYTHONFAULTHANDLER="1")
    assert data is not None, proc.stderr
    path, line = crash_line()
    # The program's own dump, on the worker's stderr, as without mpcompat.
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr
    assert '  File "%s", line %d in segfault' % (path, line) in proc.stderr, proc.stderr
    shown = _shown(data)
    assert "faulthandler, on in this program, wrote its Python stack at the crash to its " \
           "stderr (above)." in shown, shown
    assert "It crashed in " not in shown, shown
    assert "PYTHONFAULTHANDLER=1" not in shown, shown  # no advice to set what is set


LIFETIME = '''\
import multiprocessing, os, signal, sys, time
import mpcompat
from crash_helpers import segfault
from mpcompat.child_failures import channel
from pool_workers_helpers import report


def sleep():
    time.sleep(60)


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:  # workers that end well remove their own file
        pool.map(abs, range(10))
    with ctx.Pool(2) as pool:  # terminated ones (SIGTERM) leave an empty file: terminate()
        pool.map(abs, range(10))  # reaps them, and the files go
        pool.terminate()
    killed = ctx.Process(target=sleep)
    killed.start()  # one that is killed leaves an empty file: its join removes it
    os.kill(killed.pid, signal.SIGKILL)
    killed.join()
    crashed = ctx.Process(target=segfault, args=("crashed.pid",))
    crashed.start()  # a crash nobody reads (its join would): its file stays until this
    while crashed.is_alive():  # process exits
        time.sleep(0.05)
    report({"prefix": channel._files.prefix, "left": channel.files_left(),
            "crashed": crashed.pid})
'''


@pytest.mark.parametrize("method", METHODS)
def test_no_crash_file_outlives_its_use(tmp_path, method):
    data, proc = run_script(tmp_path, LIFETIME, method, timeout=120)
    assert data is not None, proc.stderr
    assert data["prefix"], data
    assert data["left"] == [data["prefix"] + str(data["crashed"])], data
    directory, start = os.path.split(data["prefix"])  # and none once the program has ended
    assert not [n for n in os.listdir(directory) if n.startswith(start)], data


DISABLED = '''\
import faulthandler, multiprocessing, sys
import mpcompat
from pool_workers_helpers import report


def state():
    return faulthandler.is_enabled()


if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
        report({"worker": pool.apply(state), "parent": faulthandler.is_enabled()})
'''


@pytest.mark.skipif(sys.platform != "linux", reason="Linux: fork and forkserver")
def test_a_worker_has_faulthandler_on_and_its_parent_not(tmp_path):
    data, proc = run_script(tmp_path, DISABLED, "fork", timeout=60)
    assert data == {"worker": True, "parent": False}, (data, proc.stderr)


READ_IN_A_THREAD = '''\
import multiprocessing, sys, threading, time
import mpcompat
from crash_helpers import segfault
from mpcompat.child_failures import exits
from pool_workers_helpers import report


def read(pid, out):
    out["lines"] = exits.crash_lines(pid)


if __name__ == "__main__":
    process = multiprocessing.get_context(sys.argv[1]).Process(target=segfault, args=("x.pid",))
    process.start()
    while process.is_alive():  # not join(), which would read the crash itself (and warn)
        time.sleep(0.05)
    imports, out = [], {}
    sys.addaudithook(lambda event, args: imports.append(args[0]) if event == "import" and
                     threading.current_thread() is not threading.main_thread() else None)
    thread = threading.Thread(target=read, args=(process.pid, out))  # as a Pool's thread would
    thread.start()
    thread.join()
    report({"lines": out["lines"], "imports": imports})
'''


@pytest.mark.parametrize("method", METHODS)
def test_reading_a_crash_imports_nothing(tmp_path, method):
    """The fork rule: the Pool's and executor's helper threads read the crash; no import."""
    data, proc = run_script(tmp_path, READ_IN_A_THREAD, method, timeout=60)
    assert data is not None, proc.stderr
    assert data["lines"] and data["lines"][0].startswith("It crashed in segfault() at "), data
    assert data["imports"] == [], data


ORPHANS = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import report

if __name__ == "__main__":
    process = multiprocessing.get_context(sys.argv[1]).Process(target=abs, args=(1,))
    process.start()
    process.join()
    report({"exitcode": process.exitcode})
'''


def test_the_files_of_a_killed_parent_go_with_the_next_start(tmp_path):
    """A parent killed by a signal cannot remove its children's crash files: the next program
    that starts a process removes those whose parent is gone, and no other."""
    import subprocess
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = "/dev/shm/mpcompat-crash-%d-0123456789ab-%d" % (gone.pid, gone.pid + 1)
    kept = "/dev/shm/mpcompat-crash-%d-0123456789ab-%d" % (os.getpid(), os.getpid() + 1)
    for path in (orphan, kept):
        open(path, "w").close()
    try:
        data, proc = run_script(tmp_path, ORPHANS, "fork", timeout=60)
        assert data == {"exitcode": 0}, proc.stderr
        assert not os.path.exists(orphan)
        assert os.path.exists(kept)  # its parent (this process) lives
    finally:
        for path in (orphan, kept):
            if os.path.exists(path):
                os.unlink(path)
