"""Stuck-wait dumps: ``MPCOMPAT_HANG_DUMP=SECONDS`` shows where a long wait is stuck.

When the main thread has waited SECONDS without progress, the stacks of this process's threads
go to stderr, then each live worker process of that wait is asked to write its own; again after
twice as long, and so on. Nothing is killed. Off by default: long waits are often legitimate.

- The waiting side: patches wrap a wait in :func:`call_watched` (a list made and a slot set,
  cheap enough for every batch). One bare thread per process, started by a wait, polls that
  slot every SECONDS/4 (at most 1 s) and stops within 0.1 s of the main thread waiting for
  nothing. Only the main thread's waits are watched: helper threads often wait for ever.
- The worker side: :func:`arm_workers` registers ``faulthandler`` on SIGURG (all threads,
  chained); forked children inherit it, spawn/forkserver children register it when the
  ``multiprocessing.stuck_waits`` patch applies on ``multiprocessing.process``. SIGURG because
  it is ignored by default: a process without the handler is never killed by it, and only
  out-of-band socket data sends it otherwise (SIGUSR1/2 kill by default; SIGWINCH comes with
  every terminal resize, SIGCHLD with every grandchild's exit).
- Fork safety: a forked child resets the state (no watchdog, no wait); a fork waits (at most
  1 s) for a dump's write to end, so that no child starts with stderr's buffer locked.
"""
import _signal  # loaded at start-up, unlike signal
import functools
import os
import sys
import threading
import time
from _thread import allocate_lock, get_ident, start_new_thread

VAR = "MPCOMPAT_HANG_DUMP"
SIGNUM = getattr(_signal, "SIGURG", None)  # None on Windows (no faulthandler.register either)
_monotonic = time.monotonic
_WORKER_PAUSE = 0.15     # seconds left to a signalled worker to write its stacks
_DELIVERY_LIMIT = 2.0    # seconds to wait at most for the signal to reach a busy worker


class _State(object):
    """This process's watchdog state, in one place (reset in a forked child)."""

    __slots__ = ("current", "main", "seconds", "started", "start_lock", "write_lock",
                 "fork_holds", "dumps", "armed_by", "handler")

    def __init__(self):
        # The main thread's wait: [obj, kind, outer wait] or None; an attribute load and a
        # store per wait, no clock read (the watchdog dates a wait when it first sees it).
        self.current = None
        self.main = threading.main_thread().ident
        self.seconds = None      # SECONDS, as last read by require(); None: off
        self.started = False     # the watchdog thread runs (or could not start)
        self.start_lock = allocate_lock()
        self.write_lock = allocate_lock()  # held while a dump writes to stderr
        self.fork_holds = {}     # thread ident -> whether its fork holds write_lock
        self.dumps = 0           # dumps written by this process
        self.armed_by = set()    # patches that want the worker-side handler
        self.handler = False     # faulthandler is registered on SIGNUM by us


_state = _State()


def kind(describe, workers=None, progress=None):
    """What a kind of wait is, for the dump, as a tuple of functions of the waited-for object:
    describe(obj) -> str; workers(obj) -> [(label, multiprocessing process)] to ask for their
    stacks; progress(obj) -> a value that changes with progress (called by the watchdog only)."""
    return (describe, workers, progress)


def require():
    """Return SECONDS and switch the watchdog on with it; raise ``NotNeeded`` when
    ``MPCOMPAT_HANG_DUMP`` is unset or not a positive number (which warns once)."""
    from mpcompat.patches import NotNeeded
    raw = os.environ.get(VAR, "").strip()
    if not raw:
        raise NotNeeded("%s is not set" % VAR)
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        from mpcompat.errors import warn
        warn("%s=%r is not a number of seconds: expected a positive number, e.g. "
             "%s=300 to dump the stacks of a wait that lasts 300 s without "
             "progress; stuck-wait dumps stay off" % (VAR, raw, VAR))
        raise NotNeeded("%s=%r is not a positive number" % (VAR, raw))
    _state.seconds = value
    return value


def short(timeout):
    """Whether a wait bounded by ``timeout`` (None: unbounded) cannot outlast SECONDS."""
    limit = _state.seconds
    return timeout is not None and (limit is None or timeout < limit)


def enter(obj, kind):
    """Record that the main thread starts waiting for ``obj``; return a token for
    :func:`leave` (None off the main thread: not watched). Nested waits stack."""
    if get_ident() != _state.main:
        return None
    rec = _state.current = [obj, kind, _state.current]
    if not _state.started:  # after the wait is visible: see _watch()
        _start()
    return rec


def leave(token):
    """The wait recorded by :func:`enter` is over: forget it (and its object, which the
    watchdog must not keep alive)."""
    if token is not None:
        token[0] = None
        if _state.current is token:
            _state.current = token[2]


def call_watched(obj, kind, call, *args, **kwargs):
    """Return ``call(*args, **kwargs)``, watched as a wait for ``obj`` while it lasts."""
    token = enter(obj, kind)
    try:
        return call(*args, **kwargs)
    finally:
        leave(token)
        # A raised exception's traceback keeps this frame: it must hold no argument (a future
        # kept by its own exception would be a cycle).
        obj = args = kwargs = token = None


def watched_method(original, kind, ready):
    """A plain function for the method ``original(self, timeout=None)``: a call that may block
    (not ``ready(self)``, no timeout shorter than SECONDS) is watched as a wait for ``self``."""
    @functools.wraps(original)
    def method(self, timeout=None):
        try:
            if ready(self) or short(timeout):
                return original(self, timeout)
            return call_watched(self, kind, original, self, timeout)
        finally:
            self = None  # as Future.result does: no cycle through a raised exception's frames
    return method


def _start():
    with _state.start_lock:
        if _state.started:
            return
        _state.started = True  # also when the thread cannot start: not retried by this wait
        try:
            # A bare thread: never in threading.enumerate() nor threading._dangling, which
            # test harnesses compare right after a test.
            start_new_thread(_watch, ())
        except Exception:
            pass


def _watch():
    """The watchdog loop: runs while the main thread waits, stops 0.1 s after it waits for
    nothing."""
    seen = last = None
    since = quiet_since = next_at = 0.0
    while True:
        slept, interval = 0.0, max(0.05, min((_state.seconds or 1.0) / 4.0, 1.0))
        while slept < interval:
            step = min(0.1, interval - slept)
            time.sleep(step)
            slept += step
            if _state.current is None:
                # Under the start lock: a wait entered meanwhile either sees the thread
                # stopped (and starts one) or keeps it running.
                with _state.start_lock:
                    _state.started = _state.current is not None
                    if not _state.started:
                        return
        try:
            rec = _state.current
            limit = _state.seconds
            if rec is None or limit is None:
                seen = None
                continue
            now = _monotonic()
            progress = _progress(rec)
            if rec is not seen:
                seen, last, since, quiet_since, next_at = rec, progress, now, now, limit
            elif progress != last:
                last, quiet_since, next_at = progress, now, limit
            quiet = now - quiet_since
            if quiet >= next_at:
                while next_at <= quiet:  # after a late wake-up too: the next one is later
                    next_at *= 2
                dump(rec, since, quiet, next_at)
        except Exception:
            pass


def _progress(rec):
    try:
        return rec[1][2](rec[0]) if rec[1][2] is not None else None
    except Exception:
        return None


def _clock(mono):
    """Wall-clock time of day of the monotonic time ``mono``."""
    wall = time.time() - (_monotonic() - mono)
    return time.strftime("%H:%M:%S", time.localtime(wall)) + (".%d" % (wall % 1 * 10))


def dump(rec, since, quiet, next_at):
    """Write the dump for the wait ``rec`` (seen since ``since``, ``quiet`` seconds without
    progress, the next dump after ``next_at``): a header, this process's threads, then each
    live worker's threads (written by the worker itself on the signal)."""
    stream = sys.stderr
    obj, kind = rec[0], rec[1]
    if stream is None or obj is None:  # obj None: the wait ended as the watchdog looked
        return
    _state.dumps += 1
    number, pid = _state.dumps, os.getpid()
    try:
        what = kind[0](obj)
    except Exception as exc:
        what = "%s (could not be described: %s)" % (type(obj).__name__, exc)
    now = _monotonic()
    started = "waiting since %s" % _clock(since)
    if now - quiet > since + 0.05:
        started = "no progress since %s, %s" % (_clock(now - quiet), started)
    lines = ["mpcompat: hang dump %d of process %d: the main thread has waited %.1f s for %s"
             % (number, pid, quiet, what),
             "mpcompat: (%s; %s=%g; next dump after %.1f s without progress; nothing is "
             "killed)" % (started, VAR, _state.seconds, next_at)]
    _write(stream, lines + _thread_stacks(pid))
    try:
        workers = list(kind[1](obj) or ()) if kind[1] is not None else []
    except Exception:
        workers = []
    for label, process in workers:
        _dump_worker(stream, label, process)
    _write(stream, ["mpcompat: end of hang dump %d of process %d" % (number, pid)])


def _write(stream, lines):
    with _state.write_lock:  # a fork waits for it: see _before_fork
        try:
            stream.write("\n".join(lines) + "\n")
            stream.flush()
        except Exception:
            pass


def _thread_stacks(pid):
    """This process's threads but the watchdog, each with its stack (most recent call last)."""
    import traceback
    names = {t.ident: t.name for t in threading.enumerate()}
    me, main = get_ident(), _state.main
    frames = sys._current_frames()
    lines = []
    for ident in sorted(frames, key=lambda ident: (ident != main, names.get(ident, ""), ident)):
        if ident == me:
            continue
        role = " (the waiting thread)" if ident == main else ""
        lines.append("mpcompat: process %d, thread %s%s, most recent call last:"
                     % (pid, names.get(ident, "0x%x" % ident), role))
        lines.append("".join(traceback.format_stack(frames[ident])).rstrip("\n"))
    del frames
    return lines


def _status(pid):
    """The fields of /proc/PID/status (Linux) as {name: value}, or None."""
    try:
        with open("/proc/%d/status" % pid) as status:
            return dict(line.split(":", 1) for line in status if ":" in line)
    except (OSError, ValueError):
        return None


def _has(status, field):
    """Whether the signal mask ``field`` of a status has SIGNUM; None when it is missing."""
    return bool(int(status[field], 16) >> (SIGNUM - 1) & 1) if field in status else None


def _dump_worker(stream, label, process):
    """Ask the worker ``process`` (if a started, unreaped child) to write its stacks."""
    popen = getattr(process, "_popen", None)
    pid = getattr(popen, "pid", None)
    # Reads only: never waits on the child (reaping belongs to its owner).
    if pid is None or getattr(popen, "returncode", 0) is not None or pid == os.getpid():
        return
    status = _status(pid) if SIGNUM is not None else {}
    # Without /proc (None) the signal is sent unchecked; a zombie has no handler.
    if status is not None and (SIGNUM is None or status.get("State", "").split()[:1] == ["Z"]
                               or _has(status, "SigCgt") is False):
        _write(stream, ["mpcompat: worker pid %d (%s) cannot write its stacks: it has no "
                        "stack-dump handler (started without mpcompat or without %s, or "
                        "exiting); 'py-spy dump --pid %d' shows them" % (pid, label, VAR, pid)])
        return
    _write(stream, ["mpcompat: worker pid %d (%s), its threads as it writes them, most recent "
                    "call first:" % (pid, label)])
    try:
        os.kill(pid, SIGNUM)
    except OSError:
        return
    # Before the next header: until the signal is no longer pending (Linux), then a moment
    # to finish writing.
    deadline = _monotonic() + _DELIVERY_LIMIT
    while _monotonic() < deadline:
        status = _status(pid)
        if status is None or not (_has(status, "SigPnd") or _has(status, "ShdPnd")):
            break
        time.sleep(0.01)
    time.sleep(_WORKER_PAUSE)


def children(obj=None):
    """The ``multiprocessing`` children of this process as ``[(name, process)]`` (a workers
    function for :func:`kind`: ``obj`` is ignored), read without reaping any."""
    try:
        from multiprocessing import process as mp_process
        procs = list(mp_process._children)
    except Exception:
        return []
    return sorted(((p.name, p) for p in procs), key=lambda item: item[1].pid or 0)


def arm_workers(owner=None):
    """Register the stack-dump handler (``faulthandler`` on SIGURG, all threads, chained) in
    this process for ``owner`` (a patch; None: for those already armed, as a forked child
    does); its forked children inherit it."""
    if owner is not None:
        _state.armed_by.add(owner)
    if _state.handler or SIGNUM is None or not _state.armed_by:
        return
    try:
        import faulthandler
        try:
            fd = sys.stderr.fileno()
        except Exception:
            fd = 2
        faulthandler.register(SIGNUM, file=fd, all_threads=True, chain=True)
        _state.handler = True
    except Exception:
        pass


def disarm_workers(owner):
    """``owner`` no longer wants the handler; unregister it once nobody does."""
    _state.armed_by.discard(owner)
    if not _state.armed_by and _state.handler:
        try:
            import faulthandler
            faulthandler.unregister(SIGNUM)
        except Exception:
            pass
        _state.handler = False


def _before_fork():
    """Let a dump's write end before forking (bounded: a stderr nobody reads blocks it)."""
    _state.fork_holds[get_ident()] = _state.write_lock.acquire(True, 1.0)


def _after_fork_in_parent():
    if _state.fork_holds.pop(get_ident(), False):
        _state.write_lock.release()


def _after_fork_in_child():
    """A forked child has no watchdog thread and waits for nothing yet."""
    _state.current = None
    _state.started = False
    _state.start_lock = allocate_lock()
    _state.write_lock = allocate_lock()
    _state.fork_holds.clear()
    _state.main = threading.main_thread().ident
    arm_workers()  # inherited; registered here only if the parent's is missing


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
