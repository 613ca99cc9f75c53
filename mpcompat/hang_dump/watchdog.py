"""The hang dump's watchdog: ``MPCOMPAT_HANG_DUMP=SECONDS`` shows where a long wait is stuck.

When the main thread has waited SECONDS without progress, the stacks of this process's threads
and of each live worker process of that wait go to stderr in one dump, the stuck ones first;
again after twice as long, and so on (saying what changed). Nothing is killed. Off by default:
long waits are often legitimate. ``MPCOMPAT_HANG_DUMP`` is read here only
(:func:`seconds_from_env`), for every hang-dump patch.

- The waiting side: patches wrap a wait in :func:`call_watched` (a :class:`WatchedWait` made
  and a slot set, cheap enough for every batch). One bare thread per process, started by a
  wait, polls that slot every SECONDS/4 (at most 1 s) and stops within 0.1 s of the main thread
  waiting for nothing. Only the main thread's waits are watched: helper threads often wait for
  ever.
- The worker side: :func:`arm_workers` registers ``faulthandler`` on SIGURG (all threads,
  chained), writing to a memory file of the worker's own (Linux; else stderr) that the waiting
  process reads through /proc, to order, condense and trim the stacks
  (:mod:`mpcompat.hang_dump.stacks`); forked children open their own, spawn and forkserver
  children register it when the ``multiprocessing.hang_dump`` patch applies on
  ``multiprocessing.process``. SIGURG because it is ignored by default: a process without the
  handler is never killed by it, and only out-of-band socket data sends it otherwise (SIGUSR1/2
  kill by default; SIGWINCH comes with every terminal resize, SIGCHLD with every grandchild's
  exit).
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

from mpcompat.hang_dump import stacks
from mpcompat.workers.user_frames import drop_own_frames

VAR = "MPCOMPAT_HANG_DUMP"
SIGNUM = getattr(_signal, "SIGURG", None)  # None on Windows (no faulthandler.register either)
_monotonic = time.monotonic
_WORKER_PAUSE = 0.15     # seconds left to a signalled worker to write its stacks
_DELIVERY_LIMIT = 2.0    # seconds to wait at most for the signal to reach a busy worker


class _WatchdogState(object):
    """This process's watchdog state, in one place (reset in a forked child)."""

    __slots__ = ("current", "main", "seconds", "started", "start_lock", "write_lock",
                 "arm_lock", "fork_holds", "dumps", "armed_by", "handler", "stacks_fd", "files",
                 "last", "starting")

    def __init__(self):
        # The main thread's wait (a WatchedWait) or None; an attribute load and a store per
        # wait, no clock read (the watchdog dates a wait when it first sees it).
        self.current = None
        self.main = threading.main_thread().ident
        self.seconds = None      # SECONDS, as last read by require(); None: off
        self.started = False     # the watchdog thread runs (or could not start)
        self.start_lock = allocate_lock()
        self.write_lock = allocate_lock()  # held while a dump writes to stderr
        self.arm_lock = allocate_lock()    # held while the handler is registered or not
        self.fork_holds = {}     # thread ident -> whether its fork holds write_lock
        self.dumps = 0           # dumps written by this process
        self.armed_by = set()    # patches that want the worker-side handler
        self.handler = False     # faulthandler is registered on SIGNUM by us
        self.stacks_fd = None    # the memory file it writes to (None: stderr)
        self.files = {}          # worker pid -> [its stacks file in /proc, bytes read]
        self.last = None         # the last dump: (wait record, number, {key: text})
        self.starting = None     # the workers' stacks when a dump was skipped: they imported


_state = _WatchdogState()


class WaitKind(object):
    """What a kind of wait is, for the dump: functions of the waited-for object.
    describe(obj) -> str; workers(obj) -> [(label, multiprocessing process)] to ask for their
    stacks; progress(obj) -> a value that changes with progress (called by the watchdog only)."""

    __slots__ = ("describe", "workers", "progress")

    def __init__(self, describe, workers=None, progress=None):
        self.describe, self.workers, self.progress = describe, workers, progress


class WatchedWait(object):
    """The main thread's wait for ``obj`` (None once it ended: the watchdog must not keep it
    alive), a wait of ``kind`` (a WaitKind), inside the wait ``outer`` (or None). Its fields are
    set by :func:`enter`: an ``__init__`` would add a call to every wait."""

    __slots__ = ("obj", "kind", "outer")


def seconds_from_env(quiet=False):
    """SECONDS from ``MPCOMPAT_HANG_DUMP``, for every hang-dump patch; raise ``NotNeeded`` when
    it is unset or not a positive number (which warns once, unless ``quiet``)."""
    from mpcompat.patcher import NotNeeded
    raw = os.environ.get(VAR, "").strip()
    if not raw:
        raise NotNeeded("%s is not set" % VAR)
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        if not quiet:
            from mpcompat.errors import warn
            warn("%s=%r is not a number of seconds: expected a positive number, e.g. "
                 "%s=300 to dump the stacks of a wait that lasts 300 s without "
                 "progress; hang dumps stay off" % (VAR, raw, VAR))
        raise NotNeeded("%s=%r is not a positive number" % (VAR, raw))
    return value


def require():
    """Return SECONDS and switch the watchdog on with it; raise ``NotNeeded`` when
    ``MPCOMPAT_HANG_DUMP`` is unset or not a positive number (which warns once)."""
    _state.seconds = seconds_from_env()
    return _state.seconds


def short_timeout(timeout):
    """Whether a wait bounded by ``timeout`` (None: unbounded) cannot outlast SECONDS."""
    limit = _state.seconds
    return timeout is not None and (limit is None or timeout < limit)


def enter(obj, kind):
    """Record that the main thread starts waiting for ``obj`` (a wait of the WaitKind
    ``kind``); return a WatchedWait for :func:`leave` (None off the main thread: not watched).
    Nested waits stack."""
    if get_ident() != _state.main:
        return None
    rec = WatchedWait()
    rec.obj, rec.kind, rec.outer = obj, kind, _state.current
    _state.current = rec
    if not _state.started:  # after the wait is visible: see _watchdog_loop()
        _start_watchdog()
    return rec


def leave(token):
    """The wait recorded by :func:`enter` is over: forget it (and its object, which the
    watchdog must not keep alive)."""
    if token is not None:
        token.obj = None
        if _state.current is token:
            _state.current = token.outer


def call_watched(obj, kind, call, *args, **kwargs):
    """Return ``call(*args, **kwargs)``, watched as a wait for ``obj`` while it lasts."""
    token = enter(obj, kind)
    try:
        return call(*args, **kwargs)
    except BaseException as exc:
        drop_own_frames(exc)  # what the wait raised is the user's: no frame of this wrapper
        raise
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
            if ready(self) or short_timeout(timeout):
                return original(self, timeout)
            return call_watched(self, kind, original, self, timeout)
        except BaseException as exc:
            drop_own_frames(exc)
            raise
        finally:
            self = None  # as Future.result does: no cycle through a raised exception's frames
    return method


def _start_watchdog():
    with _state.start_lock:
        if _state.started:
            return
        _state.started = True  # also when the thread cannot start: not retried by this wait
        try:
            # A bare thread: never in threading.enumerate() nor threading._dangling, which
            # test harnesses compare right after a test.
            start_new_thread(_watchdog_loop, ())
        except Exception:
            pass


def _watchdog_loop():
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
                if not dump(rec, since, quiet, next_at):  # its workers are still starting
                    quiet_since, next_at = now, limit
        except Exception:
            pass


def _progress(rec):
    try:
        progress = rec.kind.progress
        return progress(rec.obj) if progress is not None else None
    except Exception:
        return None


def _clock(mono):
    """Wall-clock time of day of the monotonic time ``mono``."""
    wall = time.time() - (_monotonic() - mono)
    return time.strftime("%H:%M:%S", time.localtime(wall)) + (".%d" % (wall % 1 * 10))


def dump(rec, since, quiet, next_at):
    """Write the dump for the wait ``rec`` (seen since ``since``, ``quiet`` seconds without
    progress, the next dump after ``next_at``): a header naming the user's innermost stuck
    frame, the stuck stacks (the workers' first), the waiting thread, then one line per idle
    thread or worker; a repeat dump shows only what changed (see patches.md). Returns False,
    writing nothing, while all its workers import and their stacks change: they start."""
    stream = sys.stderr
    obj, kind = rec.obj, rec.kind
    if stream is None or obj is None:  # obj None: the wait ended as the watchdog looked
        return True
    pid = os.getpid()
    try:
        what = kind.describe(obj)
    except Exception as exc:
        what = "%s (could not be described: %s)" % (type(obj).__name__, exc)
    try:
        workers = list(kind.workers(obj) or ()) if kind.workers is not None else []
    except Exception:
        workers = []
    obj = None
    sections = _thread_sections(pid)
    late, asides = [], []  # workers that write to stderr themselves; lines on the others
    sections += _worker_sections(workers, late, asides)
    starting = _workers_starting(sections, late)
    if starting is not None and starting != _state.starting:
        _state.starting = starting
        return False
    _state.starting = None
    _state.dumps += 1
    number = _state.dumps
    now = _monotonic()
    started = "waiting since %s" % _clock(since)
    if now - quiet > since + 0.05:
        started = "no progress since %s, %s" % (_clock(now - quiet), started)
    lines = _compose(rec, number, pid, sections, asides)
    process = _process_name(pid)
    lines[0] = ("mpcompat: hang dump %d of %s: the main thread has waited %.1f s for %s%s"
                % (number, process, quiet, what, lines[0]))
    lines.insert(1, "mpcompat: (%s; %s=%g; next dump after %.1f s without progress; nothing "
                    "is killed)" % (started, VAR, _state.seconds, next_at))
    _write(stream, lines)
    for label, worker in late:  # (``process`` names this process in the last line)
        _dump_worker(stream, label, worker)
    _write(stream, ["mpcompat: end of hang dump %d of %s" % (number, process)])
    return True


def _workers_starting(sections, late):
    """The stacks of the workers when every one of them is importing (a spawn worker loading
    torch takes seconds: start-up, not a hang, while those stacks change), else None."""
    workers = [s.text for s in sections if s.worker is not None]
    if workers and not late and all("<frozen importlib" in text for text in workers):
        return tuple(workers)
    return None


def _process_name(pid):
    """``process 4242``, and in a torchrun rank ``process 4242 (rank 1, local rank 0)``."""
    rank = os.environ.get("RANK")
    return "process %d" % pid + (" (rank %s, local rank %s)" % (
        rank, os.environ.get("LOCAL_RANK", "?")) if rank is not None else "")


class _Section(object):
    """One thread's stack in a dump: ``key`` (stable across dumps), ``title``, ``stack``
    (outermost first), ``main`` (the waiting thread), ``worker`` (its pid, or None)."""

    def __init__(self, key, title, stack, main=False, worker=None):
        self.key, self.title, self.stack, self.main, self.worker = key, title, stack, main, \
            worker
        self.stuck = not main and stacks.has_user_frame(stack)
        self.text = "\n".join(stacks.condensed(stack) if self.stuck or main
                              else [stacks.idle_line(stack)])


def _compose(rec, number, pid, sections, asides):
    """The dump's lines: the first is the end of the header (where it is stuck)."""
    stuck = sorted((s for s in sections if s.stuck), key=lambda s: s.worker is None)
    main = [s for s in sections if s.main]
    idle = [s for s in sections if not s.stuck and not s.main]
    focus = next((s for s in stuck + main if stacks.innermost_user(s.stack)), None)
    head = ""
    if focus is not None:
        head = "; %s %s, in %s" % ("stuck in" if focus.stuck else "waiting at",
                                   stacks.user_frame_text(stacks.innermost_user(focus.stack)),
                                   focus.title)
    texts = dict((s.key, s.text) for s in sections)
    previous = _state.last if _state.last is not None and _state.last[0] is rec else None
    _state.last = (rec, number, texts)
    lines = [head]
    if previous is not None:
        same = [s for s in sections if previous[2].get(s.key) == s.text]
        gone = len([k for k in previous[2] if k not in texts])
        if len(same) == len(sections) and not gone:
            return lines + asides + ["mpcompat: nothing changed since hang dump %d: the same "
                                     "stacks" % previous[1]]
        if same:
            lines.append("mpcompat: changed since hang dump %d: %d of %d stacks (unchanged: "
                         "%s)" % (previous[1], len(sections) - len(same), len(sections),
                                  ", ".join(s.title for s in same)))
        else:
            lines.append("mpcompat: changed since hang dump %d: all %d stacks"
                         % (previous[1], len(sections)))
        shown = set(id(s) for s in same)
        stuck, main, idle = ([s for s in part if id(s) not in shown]
                             for part in (stuck, main, idle))
    seen = {}
    for s in stuck:
        if s.worker is not None and s.text in seen:
            lines.append("mpcompat: %s: the same stack as %s" % (s.title, seen[s.text]))
            continue
        seen.setdefault(s.text, s.title)
        lines.append("mpcompat: %s, most recent call last:" % s.title)
        lines.append(s.text)
    for s in main:
        lines.append("mpcompat: process %d, %s (the waiting thread), most recent call last:"
                     % (pid, s.title))
        lines.append(s.text)
    for s in idle:
        lines.append("mpcompat: %s: %s, %s" % (s.title, "importing" if "<frozen importlib" in
                                               s.text else "idle", s.text))
    return lines + asides


def _write(stream, lines):
    with _state.write_lock:  # a fork waits for it: see _before_fork
        try:
            stream.write("\n".join(lines) + "\n")
            stream.flush()
        except Exception:
            pass


def _thread_sections(pid):
    """This process's threads but the watchdog, as sections."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me, main = get_ident(), _state.main
    frames = sys._current_frames()
    sections = []
    for ident in sorted(frames, key=lambda ident: (ident != main, names.get(ident, ""), ident)):
        if ident == me:
            continue
        name = "thread %s" % names.get(ident, "0x%x" % ident)
        sections.append(_Section("%s %d" % (name, ident), name,
                                 stacks.frames_of(frames[ident]), main=ident == main))
    del frames
    return sections


def _worker_sections(workers, late, asides):
    """Ask every live worker of ``workers`` to write its stacks, at once, and read them back as
    sections. A worker whose stacks go to stderr is added to ``late``; a line on one that has
    no handler goes to ``asides``."""
    asked = []
    for label, process in workers:
        pid = _askable_pid(process)
        if pid is None:
            continue
        if _lacks_handler(pid):
            asides.append(_no_handler(label, pid))
            continue
        path = _stacks_file(pid)
        if path is None:
            late.append((label, process))
            continue
        try:
            os.kill(pid, SIGNUM)
        except OSError:
            continue
        asked.append((label, pid, path))
    if not asked:
        return []
    deadline = _monotonic() + _DELIVERY_LIMIT
    for _, pid, _ in asked:
        _wait_delivered(pid, deadline)
    time.sleep(_WORKER_PAUSE)
    sections = []
    for label, pid, path in asked:
        sections += _read_worker(label, pid, path, asides)
    return sections


def _askable_pid(process):
    """The pid of the worker ``process`` if it is a started, unreaped child, else None. Reads
    only: never waits on the child (reaping belongs to its owner)."""
    popen = getattr(process, "_popen", None)
    pid = getattr(popen, "pid", None)
    if pid is None or getattr(popen, "returncode", 0) is not None or pid == os.getpid():
        return None
    return pid


def _lacks_handler(pid):
    """Whether worker ``pid`` has no stack-dump handler: a zombie has none; without /proc the
    signal is sent unchecked."""
    status = _proc_status(pid) if SIGNUM is not None else {}
    return status is not None and (SIGNUM is None or status.get("State", "").split()[:1] ==
                                   ["Z"] or _has(status, "SigCgt") is False)


def _no_handler(label, pid):
    return ("mpcompat: worker pid %d (%s) cannot write its stacks: it has no stack-dump handler "
            "(started without mpcompat or without %s, or exiting); 'py-spy dump --pid %d' "
            "shows them" % (pid, label, VAR, pid))


def _stacks_file(pid):
    """The /proc path of the memory file worker ``pid`` writes its stacks to, or None (it
    writes them to stderr, or /proc does not show it)."""
    known = _state.files.get(pid)
    name = "/memfd:mpcompat-stacks-%d " % pid
    try:
        if known is not None and os.readlink(known[0]).startswith(name):
            return known[0]
        directory = "/proc/%d/fd" % pid
        for fd in os.listdir(directory):
            path = os.path.join(directory, fd)
            if os.readlink(path).startswith(name):
                _state.files[pid] = [path, 0]
                return path
    except OSError:
        pass
    _state.files.pop(pid, None)
    return None


def _wait_delivered(pid, deadline):
    """Until the signal is no longer pending for ``pid`` (Linux), at most until ``deadline``."""
    while _monotonic() < deadline:
        status = _proc_status(pid)
        if status is None or not (_has(status, "SigPnd") or _has(status, "ShdPnd")):
            return
        time.sleep(0.01)


def _read_worker(label, pid, path, asides):
    """The sections of what worker ``pid`` wrote since the last read."""
    entry = _state.files.get(pid)
    try:
        with open(path, "rb") as memfile:
            memfile.seek(entry[1])
            data = memfile.read()
        entry[1] += len(data)
    except (OSError, TypeError):
        asides.append("mpcompat: worker pid %d (%s): its stacks could not be read; 'py-spy dump "
                      "--pid %d' shows them" % (pid, label, pid))
        return []
    threads = stacks.parse_faulthandler(data.decode("utf-8", "replace"))
    if not threads:
        asides.append("mpcompat: worker pid %d (%s) wrote no stacks in time (busy in C code "
                      "without the GIL's release?); 'py-spy dump --pid %d' shows them"
                      % (pid, label, pid))
        return []
    sections = []
    for thread, stack in threads:
        title = "worker pid %d (%s)" % (pid, label)
        if len(threads) > 1:
            title += ", " + thread
        sections.append(_Section("worker %d %s" % (pid, thread), title,
                                 stacks.worker_part(stack), worker=pid))
    if len(threads) > 1 and not any(s.stuck for s in sections):
        # an idle worker: one line for all its threads
        first = sections[0]
        first.title = "worker pid %d (%s)" % (pid, label)
        first.text += "; and %d more thread%s, idle" % (len(threads) - 1,
                                                      "" if len(threads) == 2 else "s")
        first.key = "worker %d" % pid
        sections = [first]
    return sections


def _proc_status(pid):
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
    pid = _askable_pid(process)
    if pid is None:
        return
    if _lacks_handler(pid):
        _write(stream, [_no_handler(label, pid)])
        return
    _write(stream, ["mpcompat: worker pid %d (%s), its threads as it writes them, most recent "
                    "call first:" % (pid, label)])
    try:
        os.kill(pid, SIGNUM)
    except OSError:
        return
    # Before the next header: delivered, then a moment to finish writing.
    _wait_delivered(pid, _monotonic() + _DELIVERY_LIMIT)
    time.sleep(_WORKER_PAUSE)


def children(obj=None):
    """The ``multiprocessing`` children of this process as ``[(name, process)]`` (a workers
    function for a :class:`WaitKind`: ``obj`` is ignored), read without reaping any."""
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
    with _state.arm_lock:
        if owner is not None:
            _state.armed_by.add(owner)
        if _state.handler or SIGNUM is None or not _state.armed_by:
            return
        try:
            import faulthandler
            faulthandler.register(SIGNUM, file=_stacks_target(), all_threads=True, chain=True)
            _state.handler = True
        except Exception:
            pass


def _stacks_target():
    """The file descriptor this process writes its stacks to on the signal: a memory file
    (Linux) its parent reads, to put them in its dump in order; else stderr."""
    if hasattr(os, "memfd_create"):
        try:
            _state.stacks_fd = os.memfd_create("mpcompat-stacks-%d" % os.getpid())
            return _state.stacks_fd
        except OSError:
            pass
    try:
        return sys.stderr.fileno()
    except Exception:
        return 2


def disarm_workers(owner):
    """``owner`` no longer wants the handler; unregister it once nobody does."""
    with _state.arm_lock:
        _state.armed_by.discard(owner)
        if not _state.armed_by and _state.handler:
            try:
                import faulthandler
                faulthandler.unregister(SIGNUM)
            except Exception:
                pass
            _state.handler = False
            _close_stacks()


def _close_stacks():
    if _state.stacks_fd is not None:
        try:
            os.close(_state.stacks_fd)
        except OSError:
            pass
        _state.stacks_fd = None


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
    _state.arm_lock = allocate_lock()
    _state.fork_holds.clear()
    _state.main = threading.main_thread().ident
    _state.files, _state.last = {}, None
    if _state.handler and _state.stacks_fd is not None:
        _close_stacks()  # the parent's: this child writes its own
        _state.handler = False
    arm_workers()  # inherited; registered here only if the parent's is missing


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
