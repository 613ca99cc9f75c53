"""Functions for the tests of ``tests/pool_workers`` (patch ``multiprocessing.pool_workers`` and
the notes on results): the tasks and initializers the Pools run (importable by name in spawn
and forkserver children), and the test side's helpers that run scenario scripts.

Keep this module importable without pytest, torch or numpy: children import it.
"""
import json
import os
import subprocess
import sys
import threading
import time
import traceback

RESULT = "RESULT "


# --- run in the workers ------------------------------------------------------------------------

# Python 3.15 formats an exception by importing _colorize, ast and dataclasses the first time: a
# worker forked while the main thread imports them inherits their import locks and freezes at
# its own first traceback (a hazard of fork with threads, with or without mpcompat). Formatting
# one here, before any Pool starts, takes those imports out of the scenarios' races.
traceback.format_exception_only(ZeroDivisionError, ZeroDivisionError("warm-up"))


def open_db(path):
    """An initializer that fails when ``path`` does not exist (FileNotFoundError)."""
    with open(path, "rb"):
        pass


def log_pid_then_open_db(log, path):
    """:func:`open_db`, after appending this process's pid to the file ``log`` (a line)."""
    with open(log, "a") as f:
        f.write("%d\n" % os.getpid())
    open_db(path)


def take_slot(path):
    """An initializer that only the first worker passes: it creates ``path``; the others fail
    with FileExistsError while it exists."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))


def double(x):
    """A task."""
    return 2 * x


def add(a, b):
    """A task for starmap."""
    return a + b


def sleep_then_double(seconds):
    """A task that takes ``seconds``."""
    time.sleep(seconds)
    return 2 * seconds


def result_with_lock(x):
    """A task whose result cannot be pickled: result['lock']."""
    return {"value": x, "lock": threading.Lock()}


class ErrorWithLock(Exception):
    """An exception that cannot be pickled: exception.lock."""

    def __init__(self, message):
        Exception.__init__(self, message)
        self.lock = threading.Lock()


def raise_with_lock(x):
    """A task that raises an exception that cannot be pickled."""
    raise ErrorWithLock("task %r failed" % (x,))


# --- run in the scenario scripts' main process ----------------------------------------------------

def outcome(call):
    """Run ``call()``; return a JSON-able dict: ``type`` ("ok" or the exception's class name),
    ``value`` (repr of what it returned), ``text`` (the exception as a traceback ends with it:
    message and notes) and ``runtime_error`` (whether it is a RuntimeError)."""
    try:
        value = call()
    except BaseException as exc:
        return {"type": type(exc).__name__, "value": None,
                "text": "".join(traceback.format_exception_only(type(exc), exc)),
                "runtime_error": isinstance(exc, RuntimeError)}
    return {"type": "ok", "value": repr(value), "text": "", "runtime_error": False}


def full_outcome(call):
    """Like :func:`outcome`, with ``text`` the whole traceback (causes included)."""
    try:
        value = call()
    except BaseException as exc:
        return {"type": type(exc).__name__, "value": None,
                "text": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                "runtime_error": isinstance(exc, RuntimeError)}
    return {"type": "ok", "value": repr(value), "text": "", "runtime_error": False}


def worker_pids(pool):
    """The pids of the live worker processes of ``pool``."""
    return [p.pid for p in list(pool._pool) if p.pid is not None and p.is_alive()]


def is_broken(pool):
    """Whether mpcompat declared ``pool`` broken (it refuses new work with BrokenPool)."""
    try:
        pool._check_running()
    except Exception as exc:
        return type(exc).__name__ == "BrokenPool"
    return False


def wait_for(condition, timeout):
    """Poll ``condition()`` until it is true; raise AssertionError after ``timeout`` s."""
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError("timed out waiting for %r" % (condition,))
        time.sleep(0.02)


def report(data):
    """Print the scenario's report for the test to read."""
    print(RESULT + json.dumps(data), flush=True)


# --- the test side -----------------------------------------------------------------------------

def run_script(tmp_path, source, *args, **kwargs):
    """Write ``source`` to ``tmp_path/scenario.py`` and run it with this interpreter, in
    ``tmp_path``. kwargs: ``timeout`` (s, default 120) and environment overrides for
    ``testenv.child_env``. Returns ``(report or None, CompletedProcess)``."""
    from testenv import child_env
    timeout = kwargs.pop("timeout", 120)
    script = os.path.join(str(tmp_path), "scenario.py")
    with open(script, "w") as fh:
        fh.write(source)
    # In a session of its own, so that a timeout kills its workers too.
    child = subprocess.Popen([sys.executable, script] + [str(a) for a in args],
                             env=child_env(**kwargs), cwd=str(tmp_path), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True,
                             start_new_session=True)
    proc = finish(child, timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    return (json.loads(lines[-1][len(RESULT):]) if lines else None), proc


def finish(child, timeout):
    """Wait for ``child`` (started in a session of its own) at most ``timeout`` s, then kill
    what is left of its process group; return the CompletedProcess (a timeout raises)."""
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        raise
    finally:
        if child.poll() is None:
            _kill_group(child)
    _kill_group(child, leftovers_only=True)
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def _kill_group(child, leftovers_only=False):
    """Kill the process group of ``child`` (its workers included); wait for ``child``."""
    import signal
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass  # the group is gone already
    if not leftovers_only:
        child.communicate()


def flat(text):
    """``text`` with all whitespace runs made single spaces (reports wrap long lines)."""
    return " ".join(text.split())


# --- tasks whose worker dies, and other ways to lose a task (run in the workers) -----------------

def die(how):
    """A task that kills its worker as ``how`` says (SIGKILL, SIGSEGV, exit3, exit1); else
    doubles ``how``."""
    import signal
    if how in ("SIGKILL", "SIGSEGV"):
        os.kill(os.getpid(), getattr(signal, how))
        time.sleep(10)
    if how in ("exit3", "exit1"):
        os._exit(int(how[-1]))
    return 2 * how


def wait_for_service(ready_at):
    """An initializer that fails (ConnectionRefusedError) until the time ``ready_at``."""
    if time.time() < ready_at:
        raise ConnectionRefusedError("the service is not up yet")


class WeirdError(Exception):
    """An exception pickle cannot rebuild: its __init__ takes two arguments, it passes one."""

    def __init__(self, a, b):
        Exception.__init__(self, "%s and %s" % (a, b))


def raise_weird(x):
    """A task that raises WeirdError."""
    raise WeirdError(x, x)


# --- a worker that dies at each instant of a task (run in the workers) --------------------------

def _kill_me():
    import signal
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)


class DieWhenUnpickled(object):
    """An argument that SIGKILLs the process unpickling it (a worker unpickling its task)."""

    def __reduce__(self):
        return _kill_me, ()


class DieWhenPickled(object):
    """A result that SIGKILLs the process pickling it (a worker sending it back)."""

    def __reduce__(self):
        _kill_me()


def result_that_dies_when_pickled(x):
    """A task whose worker dies pickling its result."""
    return DieWhenPickled()


def big_result_then_die(size, wait, delay, started=None):
    """A task that returns ``size`` bytes after ``wait`` s, and SIGKILLs its worker ``delay`` s
    later, while it sends them (when the parent does not read meanwhile, the send blocks);
    it creates the file ``started`` (if given) as it starts."""
    if started:
        open(started, "w").close()
    threading.Timer(wait + delay, _kill_me).start()
    time.sleep(wait)
    return b"x" * size


def exit_at_once():
    """An initializer that ends its worker without raising (os._exit(3))."""
    os._exit(3)


def kill_at_once():
    """An initializer that SIGKILLs its worker."""
    _kill_me()


def sys_exit(code):
    """A task that calls sys.exit(code)."""
    sys.exit(code)


def pid_after(seconds):
    """A task that sleeps ``seconds``, then returns the worker's pid."""
    time.sleep(seconds)
    return os.getpid()


def hold_the_gil(seconds):
    """In the scenario's main process: keep the GIL for ``seconds`` (the Pool's handler threads
    do not run meanwhile)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 5)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            pass
    finally:
        sys.setswitchinterval(interval)


def slow_double(x, seconds):
    """A task that takes ``seconds`` and doubles ``x``."""
    time.sleep(seconds)
    return 2 * x
