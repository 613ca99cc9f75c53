"""Stuck-wait dumps: ``MPCOMPAT_HANG_DUMP=SECONDS`` shows where a long wait is stuck.

When the main thread of a process waits more than SECONDS without progress for a DataLoader
batch, a Pool/ThreadPool result, a ``concurrent.futures`` future or a
``torch.multiprocessing.spawn`` join, the stacks of this process's threads are written to
stderr, then each live worker process of that loader or pool is asked to write its own; again
after twice as long, and so on (never a flood). Nothing is killed, nothing else changes.

Off by default (``MPCOMPAT_HANG_DUMP`` unset): long waits are often legitimate (a
``torch.multiprocessing.spawn`` join lasts a whole training run, Pool tasks can take hours),
and a stack dump there is noise. Turn it on when a program seems stuck.

Parts:
- the waiting side: patches call :func:`enter` before a wait that may block and :func:`leave`
  after it (a 3-item list made and a list slot set: cheap enough for every batch and every
  result);
  one daemon thread per process, started by a wait, polls that slot and the wait's
  progress every SECONDS/4 (at most 1 s), dumps (:func:`dump`), and stops within 0.1 s of the
  main thread waiting for nothing (the next wait starts it again). Only the main thread's
  waits are watched: helper threads often wait for ever by design.
- the worker side: :func:`arm_workers` registers ``faulthandler`` on ``SIGURG`` in this
  process (``all_threads=True, chain=True``); forked children inherit it, spawn and forkserver
  children register it when the ``multiprocessing.stuck_waits`` patch applies there (on
  ``multiprocessing.process``, which every child imports). SIGURG because its default action
  is to be ignored: a process without the handler (a worker started without mpcompat, a pid
  that is not ours) is never killed by it, and nothing but out-of-band socket data ever sends
  it otherwise (SIGUSR1/2 and real-time signals kill by default; SIGWINCH comes with every
  terminal resize, SIGCHLD with every grandchild's exit).
- fork safety: a forked child has no watchdog thread and is waiting for nothing; an at-fork
  handler resets that state (the child starts its own thread at its first wait). A fork
  waits (at most 1 s) for a dump's write to stderr to end, so that no child starts with
  stderr's buffer locked by the watchdog thread it does not have.
"""
import os
import sys
import threading
import time
from _thread import allocate_lock, get_ident, start_new_thread

VAR = "MPCOMPAT_HANG_DUMP"
_monotonic = time.monotonic

# The main thread's current wait (_state.current): [obj, kind, outer wait] or None; the hot
# path is an attribute load and a store. leave() clears obj: the watchdog may hold an ended
# wait until its next look, and must not keep a DataLoader iterator (and its workers) alive.
# No clock is read per wait: the watchdog dates a wait when it first sees it (at most one poll
# interval late, so a dump may come that much later, never sooner); most waits end before
# it looks.


class _State(object):
    """This process's watchdog state, in one place (reset in a forked child)."""

    __slots__ = ("current", "main", "seconds", "started", "start_lock", "write_lock",
                 "fork_holds", "dumps", "armed_by", "handler", "fork_hook")

    def __init__(self):
        self.current = None      # the main thread's wait: [obj, kind, outer wait] or None
        self.main = threading.main_thread().ident
        self.seconds = None      # SECONDS, as last read by a patch that applied; None: off
        self.started = False     # the watchdog thread of this process runs (or could not start)
        self.start_lock = allocate_lock()
        self.write_lock = allocate_lock()  # held while a dump writes to stderr (see _write)
        self.fork_holds = {}     # thread ident -> True: its fork took write_lock (_before_fork)
        self.dumps = 0           # dumps written by this process
        self.armed_by = set()    # patches that want the worker-side handler
        self.handler = False     # faulthandler is registered on the signal by us
        self.fork_hook = False   # the at-fork handler is registered (at the first require())


_state = _State()
_WORKER_PAUSE = 0.15     # seconds left to a signalled worker to write its stacks
_DELIVERY_LIMIT = 2.0    # seconds to wait at most for the signal to reach a busy worker


def _signal():
    import signal
    return getattr(signal, "SIGURG", None)


def kind(describe, workers=None, progress=None):
    """What a kind of wait is, for the dump: three functions of the waited-for object, as a
    tuple (patches may build it themselves without importing this module).

    describe(obj) -> str: what is waited for ("a batch from a DataLoader (2 workers)").
    workers(obj) -> [(label, process)]: the worker processes to ask for their stacks
        (``multiprocessing`` Process objects; threads and exited processes are skipped).
    progress(obj) -> any value that changes when the wait makes progress (chunks arrived,
        futures done), or None. It is called by the watchdog thread only, never per item.
    """
    return (describe, workers, progress)


def seconds():
    """Read ``MPCOMPAT_HANG_DUMP``: its positive number of seconds, or None when unset or bad.

    A value that is not a positive number gives one warning (naming the value and the expected
    form) and counts as unset.
    """
    raw = os.environ.get(VAR, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        from mpcompat.errors import warn
        warn("%s=%r is not a number of seconds: expected a positive number, e.g. "
             "%s=300 to dump the stacks of a wait that lasts 300 s without "
             "progress; stuck-wait dumps stay off" % (VAR, raw, VAR))
        return None
    return value


def require():
    """Return the configured SECONDS and switch the watchdog on with it; raise
    ``NotNeeded`` when ``MPCOMPAT_HANG_DUMP`` is unset or bad (then nothing is wrapped)."""
    from mpcompat.patches import NotNeeded
    value = seconds()
    if value is None:
        raw = os.environ.get(VAR, "").strip()
        raise NotNeeded("%s is not set" % VAR if not raw
                        else "%s=%r is not a positive number" % (VAR, raw))
    _state.seconds = value
    if not _state.fork_hook and hasattr(os, "register_at_fork"):
        _state.fork_hook = True
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)
    return value


def short(timeout):
    """Whether a wait bounded by ``timeout`` (not None) cannot outlast SECONDS (not watched)."""
    limit = _state.seconds
    return limit is None or timeout < limit


def enter(obj, kind):
    """Record that the main thread starts waiting for ``obj`` (``kind`` from :func:`kind`);
    return a token for :func:`leave`, or None when the caller is not the main thread (not
    watched).

    Never raises. Nested waits stack: the inner one is watched until it ends.
    """
    if get_ident() != _state.main:
        return None
    rec = _state.current = [obj, kind, _state.current]
    if not _state.started:  # after the wait is visible: see _idle()
        _start()
    return rec


def leave(token):
    """The wait recorded by :func:`enter` is over (returned or raised): forget it."""
    if token is not None:
        token[0] = None
        if _state.current is token:
            _state.current = token[2]


def call_watched(obj, kind, call, *args, **kwargs):
    """Return ``call(*args, **kwargs)``: a wait for ``obj`` (``kind`` from :func:`kind`) that the
    watchdog watches while it lasts (see :func:`enter`).

    Once it returns or raises, its frame holds none of the arguments: a raised exception's
    traceback keeps that frame, and a future kept by its own exception would be a cycle.
    """
    token = enter(obj, kind)
    try:
        return call(*args, **kwargs)
    finally:
        leave(token)
        obj = args = kwargs = token = None


def _start():
    with _state.start_lock:
        if _state.started:
            return
        _state.started = True  # also when the thread cannot start: not retried by this wait
        try:
            # A bare thread, not a threading.Thread: it is never in threading.enumerate() nor
            # in threading._dangling, which test harnesses compare right after a test; it
            # stops within 0.1 s of the last watched wait (see _watch).
            start_new_thread(_watch, ())
        except Exception:
            pass


def _poll_interval():
    limit = _state.seconds or 1.0
    return max(0.05, min(limit / 4.0, 1.0))


def _idle():
    """Whether the watchdog may stop: nothing is watched now. Decided under the start lock, so
    that a wait entered meanwhile either sees the thread stopped (and starts a new one) or
    keeps it running."""
    with _state.start_lock:
        _state.started = False
        if _state.current is None:
            return True
        _state.started = True
        return False


def _watch():
    """The watchdog loop: runs while the main thread waits, and stops soon (0.1 s) after it
    waits for nothing, so that no thread is left behind (a test harness counts them)."""
    seen = last = None
    since = quiet_since = next_at = 0.0
    while True:
        slept, interval = 0.0, _poll_interval()
        while slept < interval:
            step = min(0.1, interval - slept)
            time.sleep(step)
            slept += step
            if _state.current is None and _idle():
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
    func = rec[1][2]
    if func is None:
        return None
    try:
        return func(rec[0])
    except Exception:
        return None


def _clock(mono):
    """Wall-clock time of day of the monotonic time ``mono``."""
    wall = time.time() - (_monotonic() - mono)
    return time.strftime("%H:%M:%S", time.localtime(wall)) + (".%d" % (wall % 1 * 10))


def dump(rec, since, quiet, next_at):
    """Write the dump for the wait ``rec`` (seen since the monotonic time ``since``, ``quiet``
    seconds without progress, the next dump after ``next_at`` seconds without progress): a
    header, this process's threads, then each live worker's threads (written by the worker
    itself on the signal). Called by the watchdog."""
    stream = sys.stderr
    if stream is None:
        return
    obj, kind = rec[0], rec[1]
    if obj is None:  # the wait ended as the watchdog looked
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
             "mpcompat: (%s; %s=%s; next dump after %.1f s without progress; nothing is "
             "killed)" % (started, VAR, _fmt_seconds(_state.seconds), next_at)]
    lines.extend(_thread_stacks(pid))
    _write(stream, lines)
    for label, process in _workers(kind, obj):
        _dump_worker(stream, label, process)
    _write(stream, ["mpcompat: end of hang dump %d of process %d" % (number, pid)])


def _fmt_seconds(value):
    return ("%g" % value) if value is not None else "?"


def _write(stream, lines):
    # Under _write_lock: a fork waits for the write to end, so that no child starts with
    # stderr's buffer locked by this thread (which does not exist in the child).
    with _state.write_lock:
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
    order = sorted(frames, key=lambda ident: (ident != main, names.get(ident, ""), ident))
    lines = []
    for ident in order:
        if ident == me:
            continue
        role = " (the waiting thread)" if ident == main else ""
        lines.append("mpcompat: process %d, thread %s%s, most recent call last:"
                     % (pid, names.get(ident, "0x%x" % ident), role))
        lines.append("".join(traceback.format_stack(frames[ident])).rstrip("\n"))
    del frames
    return lines


def _workers(kind, obj):
    if kind[1] is None:
        return []
    try:
        return list(kind[1](obj) or ())
    except Exception:
        return []


def _live_pid(process):
    """The pid of a started, not yet reaped child process; None for a thread or an exited one.

    Reads only (never waits on the child: reaping belongs to its owner)."""
    popen = getattr(process, "_popen", None)
    pid = getattr(popen, "pid", None)
    if pid is None or getattr(popen, "returncode", 0) is not None or pid == os.getpid():
        return None
    return pid


def _status(pid):
    """The text of /proc/PID/status (Linux), or None."""
    try:
        with open("/proc/%d/status" % pid) as status:
            return status.read()
    except (OSError, ValueError):
        return None


def _mask_has(text, field, signum):
    """Whether the signal mask ``field`` (SigCgt, SigPnd, ShdPnd) of a status text has
    ``signum``; None when the field is missing."""
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return None


def _has_handler(pid, signum):
    """Whether process ``pid`` catches ``signum`` (Linux: /proc/PID/status); None: unknown.
    Returns False for a zombie."""
    text = _status(pid)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("State:") and "Z" in line.split()[1:2]:
            return False
    return _mask_has(text, "SigCgt", signum)


def _await_delivery(pid, signum):
    """Give a signalled worker the time to write its stacks before the next header: until the
    signal is no longer pending (Linux), then a moment to finish writing; a fixed pause where
    pending signals cannot be read."""
    deadline = _monotonic() + _DELIVERY_LIMIT
    while _monotonic() < deadline:
        text = _status(pid)
        if text is None:
            break
        if not (_mask_has(text, "SigPnd", signum) or _mask_has(text, "ShdPnd", signum)):
            time.sleep(_WORKER_PAUSE)
            return
        time.sleep(0.01)
    time.sleep(_WORKER_PAUSE)


def _dump_worker(stream, label, process):
    pid = _live_pid(process)
    if pid is None:
        return
    signum = _signal()
    handler = _has_handler(pid, signum) if signum is not None else False
    if handler is False:
        _write(stream, ["mpcompat: worker pid %d (%s) cannot write its stacks: it has no "
                        "stack-dump handler (started without mpcompat or without %s, or "
                        "exiting); 'py-spy dump --pid %d' shows them" % (pid, label, VAR, pid)])
        return
    _write(stream, ["mpcompat: worker pid %d (%s), its threads as it writes them, most recent "
                    "call first:" % (pid, label)])
    try:
        os.kill(pid, signum)
    except OSError:
        return
    _await_delivery(pid, signum)


def children():
    """The ``multiprocessing`` children of this process, as ``[(name, process)]``.

    Read without reaping anything (``active_children()`` would wait on exited ones)."""
    try:
        from multiprocessing import process as mp_process
        procs = list(mp_process._children)
    except Exception:
        return []
    return sorted(((p.name, p) for p in procs), key=lambda item: item[1].pid or 0)


def arm_workers(owner):
    """Register the stack-dump handler (``faulthandler`` on SIGURG, all threads, chained) in
    this process, on behalf of ``owner`` (a patch); its forked children inherit it."""
    _state.armed_by.add(owner)
    _register()


def disarm_workers(owner):
    """``owner`` no longer wants the handler; unregister it once nobody does."""
    _state.armed_by.discard(owner)
    if not _state.armed_by and _state.handler:
        signum = _signal()
        try:
            import faulthandler
            faulthandler.unregister(signum)
        except Exception:
            pass
        _state.handler = False


def _register():
    if _state.handler:
        return
    signum = _signal()
    if signum is None:  # Windows: no SIGURG, and no faulthandler.register
        return
    try:
        import faulthandler
        try:
            fd = sys.stderr.fileno()
        except Exception:
            fd = 2
        faulthandler.register(signum, file=fd, all_threads=True, chain=True)
        _state.handler = True
    except Exception:
        pass


def _before_fork():
    """Let a dump's write end before forking (bounded: a stderr nobody reads blocks it)."""
    if _state.write_lock.acquire(True, 1.0):
        _state.fork_holds[get_ident()] = True


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
    if _state.armed_by:
        _register()  # inherited already; repeated in case the parent's was undone meanwhile

