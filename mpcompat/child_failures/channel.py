"""Why a child process failed while starting, told to its parent; and the parent's side of every
start (loaded as the first child starts), what explaining a child's end later needs.

A child that dies before it runs its target (it cannot unpickle what it was sent or import the
main module, a Pool initializer raises) calls :func:`record`; its parent, noticing the dead
child, calls :func:`take` or :func:`note_for` and names the cause in its own error.

The channel is a listening Unix socket the parent opens (:func:`listen`) as its first child
starts; spawn and forkserver children get its address in their preparation data (the
``failure_records`` patch), fork children inherit it. A child loads this module only to record:
it connects, writes one record and closes; the record waits in the kernel until the parent
reads it. The parent reads only the children it started (:func:`start_child`), as the kernel
names the sender (``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID`` on macOS), closes any other
connection unread, and never waits for a slow sender. On Linux the socket is abstract;
elsewhere on Unix it is a file in a private directory removed at exit; Windows has no channel.

The parent's side runs in the helper threads of Pools and executors: all it needs is imported
here, loaded by the first start in the user's thread, never in them (a fork child made
meanwhile would inherit the held import lock); what a record is said with
(:mod:`mpcompat.child_failures.exits`) is loaded by whoever reads it there, as the Pool or the
executor is made. Nothing runs at import.

Each start (:func:`start_child`, from the ``failure_records`` patch's ``BaseProcess.start``)
also names in the child the path of its crash file but its pid (:func:`prepare`:
``/dev/shm/mpcompat-crash-<parent pid>-<random>-``, else in multiprocessing's temporary
directory), which the child arms as it starts (``mp_children.arm``); :func:`joined`
removes one no crash wrote, the parent the one it reads (``exits.crash_lines``) and those left
as it exits. A plain ``Process`` (not a worker whose owner names its cause) is remembered with
the line that started it, and named if it ends non-zero (:func:`ended`).

Also here, as every start in the parent loads it with the rest: the exit evidence (the
``multiprocessing.exit_evidence`` patch's), what the kernel measures of a child's end: the OOM
kill counters as it starts (:func:`snapshot`, :class:`batch`) and after a SIGKILL as it is
reaped (:func:`reaped`), its peak resident memory (:func:`peak`).
"""
import os
import signal
import socket
import sys
import threading
import time
import types

from mpcompat.patches.mp_children import CRASH_ENV, CRASH_KEY, child, joined_late

PREFIX = "mpcompat: "
# Who names a spawn or forkserver child's start-up error, as its preparation data says
# (``failure_records.NAMED``):
# BY_OWNER: the error the owner's wait raises names it (a Pool's, an executor's, a DataLoader's,
# torch.multiprocessing.spawn's), or, for a plain Process, the parent's warning (at join(), as
# is_alive() sees it ended, at the latest as the parent exits): the child prints nothing.
# Absent: nobody would (the owner's patch is off or not applied): the child sends no record, and
# prints the cause on one line (BY_NOBODY).
BY_OWNER, BY_NOBODY = "owner", "nobody"
_MAX_ERROR = 2000         # characters kept of the error line
_MAX_NOTE = 8000          # characters kept of each note
_MAX_RECORD = 200000      # bytes of a record
_MAX_KEPT = 1000          # records read but not yet taken, newest kept
_MAX_STARTED = 100000     # pids of the children started, newest kept
_MAX_PENDING = 64         # connections kept unread while a start is under way
_READ_TIME = 0.2          # seconds one read of the channel may take in all
_MARK = "_mpcompat_recorded"


class FailureRecord(object):
    """Why a child failed while starting, as it sent it (:func:`record`): ``pid``, ``time`` (when
    it was sent), ``what`` (the step that failed, or None), ``error`` ("Type: message") and
    ``notes`` (mpcompat's notes on the error, at most 8)."""

    __slots__ = ("pid", "time", "what", "error", "notes")

    def __init__(self, pid, time, what, error, notes):
        self.pid, self.time, self.what, self.error, self.notes = pid, time, what, error, notes

    def alike(self):
        """What makes two children fail the same way: error, notes and step."""
        return self.error, tuple(self.notes), self.what

    def headline(self):
        """The error up to its first blank line, on one line (the bootstrapping-phase error
        spans fifteen indented lines)."""
        return " ".join(self.error.strip().split("\n\n", 1)[0].split())


class _Channel(object):
    """This process's listening socket (``address``: "<owner pid>:<socket address>"), the
    records read, not yet taken (``records``: pid -> record, in arrival order), the children it
    started (``started``: pid -> the time its start began, oldest first: :func:`start_child`),
    the connections not read to the end (``pending``: connection -> [sender's pid, bytes so
    far]), the starts under way (``starts``: the times they began);
    ``lock``: held by the thread that reads; ``parent``: the channel a fork child inherited."""
    owner = sock = address = directory = parent = lock = None

    def __init__(self):
        self.empty()

    def empty(self):
        """Forget the records, the children, the connections and the starts."""
        self.records, self.started, self.pending, self.starts = {}, {}, {}, []


_channel = _Channel()


def listen():
    """Before starting a child: open this process's channel and name its children's crash
    files, where it has not. Never raises."""
    try:
        if _channel.owner != os.getpid():
            _open()
        _prefix()
    except Exception:
        pass


def _open():
    if not hasattr(socket, "AF_UNIX"):
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    directory = None
    try:
        if sys.platform.startswith("linux"):
            address = "\0mpcompat-%d-%s" % (os.getpid(), os.urandom(8).hex())
        else:
            # Runs in the thread that starts this process's first child: the user's, never a
            # Pool's or an executor's helper thread.
            import tempfile
            directory = tempfile.mkdtemp(prefix="mpcompat-")
            address = os.path.join(directory, "failures")
        sock.bind(address)
        sock.listen(4096)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        _remove_directory(directory)
        raise
    inherited = [_channel.sock] + list(_channel.pending)  # the parent's, from a fork
    if _channel.owner is not None:
        _channel.parent = _channel.address
    _channel.owner, _channel.sock, _channel.directory = os.getpid(), sock, directory
    _channel.empty()
    _channel.lock = threading.Lock()  # one the parent may have held at the fork is not used
    for conn in inherited:
        if conn is not None:
            conn.close()
    # After multiprocessing has joined (or terminated) the children at exit, not before: a child
    # that fails meanwhile still reaches the channel, and the records left untaken are named
    # just before it closes (finalizers of higher priority run first).
    from multiprocessing import util
    util.Finalize(None, _close, args=(os.getpid(),), exitpriority=CLOSE_PRIORITY)
    util.Finalize(None, _name_untaken, exitpriority=CLOSE_PRIORITY + 1)
    _channel.address = "%d:%s" % (os.getpid(), address.replace("\0", "@", 1))


def address():
    """This process's channel ("<pid>:<address>") for the children it starts, or None."""
    return _channel.address if _channel.owner == os.getpid() else None


def _told():
    """(pid, the parent's channel, who names this child's start-up error) that this spawn or
    forkserver child's preparation data said (the ``failure_records`` patch), or None. Only
    as a child fails."""
    if child.told is None or child.told[0] != os.getpid():
        joined_late()
    told = child.told
    return told if told is not None and told[0] == os.getpid() else None


def named_by():
    """In a spawn or forkserver child: who names its start-up error, as its parent said:
    ``BY_OWNER`` or ``BY_NOBODY``; None without a parent's channel."""
    told = _told()
    if told is None:
        return None
    return BY_OWNER if told[2] == BY_OWNER else BY_NOBODY


def _parent_address():
    told = _told()
    if told is not None:
        # It wins over a channel that came with a fork: a forkserver that opened one while
        # importing the main module forks its children with it.
        return told[1]
    if _channel.owner is not None and _channel.owner != os.getpid():
        return _channel.address  # a fork child: the parent's channel came with the memory
    return _channel.parent


CLOSE_PRIORITY = -100  # of the finalizer that closes the channel as the process exits


def _close(owner):
    if _channel.owner == owner == os.getpid() and _channel.sock is not None:
        _channel.sock.close()
        _remove_directory(_channel.directory)


def _remove_directory(directory):
    if directory:
        import shutil  # at exit, or when the channel could not open
        shutil.rmtree(directory, ignore_errors=True)


# --- the parent's side of each start ------------------------------------------------------------

# Targets whose owners name a dead worker's cause in their own error.
_OWNED = ("multiprocessing.pool", "concurrent.futures.process", "torch.")
_OWNED_MARK = "_mpcompat_owner_names_failures"
_ENDED_MARK = "_mpcompat_ended"
_NAMED_MARK = "_mpcompat_named"  # a plain Process whose end was looked into
# Worker targets, and the patch whose error (the one its owner's wait raises) names a worker
# that failed while starting: while it is applied, such a worker prints nothing.
_NAMED_BY = {
    ("multiprocessing.pool", "worker"): "mpcompat.patches.mp_pool_workers",
    ("concurrent.futures.process", "_process_worker"): "mpcompat.patches.futures_process_workers",
    ("torch.utils.data._utils.worker", "_worker_loop"):
        "mpcompat.patches.torch_dataloader_workers",
    ("torch.multiprocessing.spawn", "_wrap"): "mpcompat.patches.torch_spawn_errors",
}
# pid -> (name, file, line that called start()) of each plain Process started, not seen ended
_plain = {}
_MAX_PLAIN = 100000
_TMPFS = "/dev/shm"
CRASH_SIGNALS = frozenset(int(getattr(signal, name)) for name in (
    "SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL") if hasattr(signal, name))
# owner: the pid whose children's crash files are at prefix (their path, but the pid)
_files = types.SimpleNamespace(owner=None, prefix=None)


def start_child(process, start):
    """``start(process)`` (``BaseProcess.start``) with what the start of a child does so that its
    failure can be explained: its crash file named, its pid told to the channel, a plain
    Process remembered with the line that started it."""
    # One function: each one a start runs costs it the copy-on-write faults of the objects
    # it touches (the previous start's fork shares every page with that child).
    # Read before: start() deletes the target (bpo-30775).
    owned = (getattr(getattr(process, "_target", None), "__module__", None) or "").startswith(
        _OWNED)
    since = time.time()
    # Until the start returns, a connection from a process not known yet is kept unread, not
    # closed: the child may record before its start has returned its pid.
    _channel.starts.append(since)
    try:
        prepare(process)
        start(process)
    finally:
        if since in _channel.starts:
            _channel.starts.remove(since)
    pid = process.pid
    try:
        # Its records sent since then are accepted from now on; one an earlier child with that
        # pid left untaken is dropped.
        children = _channel.started
        children.pop(pid, None)  # the newest last
        children[pid] = since
        if len(children) > _MAX_STARTED:
            del children[next(iter(children))]
        _channel.records.pop(pid, None)
        if owned:
            process.__dict__[_OWNED_MARK] = True
        else:
            caller = _outside_mpcompat(sys._getframe(1))
            _plain[pid] = (process.name, caller.f_code.co_filename, caller.f_lineno)
            if len(_plain) > _MAX_PLAIN:
                del _plain[next(iter(_plain))]
    except Exception:
        pass


def _outside_mpcompat(frame):
    """The first frame from ``frame`` outward that is not mpcompat's (the outermost if all
    are)."""
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
            "mpcompat."):
        frame = frame.f_back
    return frame


def namer(target, args, owned):
    """Who names the start-up error of a child with ``target``
    (``mp_children.NAMED``): the owner of a known worker whose patch is applied (a Pool's
    worker only with its channel: a Pool that runs as the standard library's names nothing),
    the parent for a plain Process, else nobody (None: not sent)."""
    if not owned:
        return BY_OWNER  # the parent warns
    key = (getattr(target, "__module__", None), getattr(target, "__qualname__", None))
    patch = sys.modules.get(_NAMED_BY.get(key, ""))
    try:
        if patch is None or not patch.patcher.applied():
            return None
    except Exception:
        return None
    if key[0] == "multiprocessing.pool" and not (
            args and type(args[0]) is types.SimpleNamespace and hasattr(args[0], "conn")):
        return None
    return BY_OWNER


def named_for(name, frame):
    """:func:`namer` for the process object named ``name`` that ``spawn.get_preparation_data``
    is called for, from ``frame`` (its caller) out."""
    # A frame read: the process object is _launch's (popen_spawn_posix, popen_forkserver;
    # popen_spawn_win32's __init__), where start() passed it, a frame or two out.
    for _ in range(3):
        process = frame.f_locals.get("process_obj") if frame is not None else None
        if getattr(process, "_name", None) == name:
            target = getattr(process, "_target", None)
            return namer(target, getattr(process, "_args", ()), (
                getattr(target, "__module__", None) or "").startswith(_OWNED))
        frame = frame.f_back if frame is not None else None
    return None


def ended(process, measured=True):
    """``process`` has ended, or was never started (join; is_alive, ``measured`` False). Once
    it ended non-zero: remove the crash file it may have left without crashing; a plain Process
    is named, once, with what it recorded (a warning per cause), or, at join, what was measured
    (is_alive leaves a crash to join, which reads its stack)."""
    if not process.exitcode:
        _plain.pop(process.pid, None)
        return
    state = process.__dict__
    if state.get(_NAMED_MARK) is True:
        return
    if not state.get(_ENDED_MARK):
        state[_ENDED_MARK] = True
        joined(process.pid, process.exitcode)
    if state.get(_OWNED_MARK) or (not measured and state.get(_NAMED_MARK) == "looked"):
        return
    try:  # a plain Process: joined or polled by the user's code (a helper thread owns workers)
        from mpcompat.child_failures.exits import name_ended
        state[_NAMED_MARK] = name_ended(process, _plain, measured)
    except Exception:
        state[_NAMED_MARK] = True


def _name_untaken():
    try:
        records = untaken() if _channel.owner == os.getpid() else ()
        if records:
            from mpcompat.child_failures.exits import name_untaken
            name_untaken(records, _plain)
    except Exception:
        pass


def prepare(process):
    """Before ``process`` starts: name in it the path of its crash file, but its pid. Never
    raises."""
    try:
        process._config[CRASH_KEY] = _files.prefix if _files.owner == os.getpid() else _prefix()
    except Exception:
        pass


def share_with_children():
    """In a parent whose children are not ``multiprocessing``'s (torchrun's agent): name the
    path of their crash files, but their pid, in ``os.environ``, which they inherit
    (``mp_children.arm_inherited``). Never raises."""
    try:
        os.environ[CRASH_ENV] = _prefix()
    except Exception:
        pass


def _prefix():
    if _files.owner != os.getpid():
        _files.prefix, _files.owner = _new_prefix(), os.getpid()
    return _files.prefix


def _new_prefix():
    """This process's crash files' path, but the pid: in /dev/shm where it can be (a fresh
    worker creates its file there in about 20 us, on a disk in 150 us), else in
    multiprocessing's temporary directory; those left are removed when this process exits."""
    # The first start in this process: the user's thread (a Pool's or an executor's helper
    # threads only restart workers), so the import here is safe.
    from multiprocessing import util
    directory = _TMPFS if os.access(_TMPFS, os.W_OK) else util.get_temp_dir()
    util.Finalize(None, _remove_left, args=(os.getpid(),), exitpriority=-100)
    _remove_orphans(directory)
    # Files, not a directory of their own: a program that ends with os._exit() leaves nothing
    # when its workers ended well. The random part keeps others from guessing the names.
    return os.path.join(directory, "mpcompat-crash-%d-%s-" % (os.getpid(),
                                                              os.urandom(6).hex()))


def path(pid):
    """The crash file of this process's child ``pid``, or None."""
    return _files.prefix + str(pid) if _files.owner == os.getpid() and _files.prefix else None


def files_left():
    """The paths of the crash files of this process's children still on disk."""
    if _files.owner != os.getpid() or not _files.prefix:
        return []
    directory, start = os.path.split(_files.prefix)
    try:
        return [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(start)]
    except OSError:
        return []


def _remove_orphans(directory):
    """Remove the crash files of parents that are gone: a parent killed by a signal could not
    remove its own (its children's files are all it leaves)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        owner = name.split("-")[2] if name.startswith("mpcompat-crash-") else ""
        try:
            if owner.isdigit():
                os.kill(int(owner), 0)  # ProcessLookupError: gone (another user's: OSError)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
        except OSError:
            pass


def _remove_left(owner):
    if owner == os.getpid():
        for left in files_left():
            try:
                os.unlink(left)
            except OSError:
                pass


def joined(pid, exitcode):
    """Child ``pid`` was joined and ended with ``exitcode``: if no crash signal ended it, remove
    the file it left (empty: a SIGKILL, SIGTERM or ``os._exit`` skips the child's own removal).
    Never raises."""
    try:
        if exitcode and -exitcode not in CRASH_SIGNALS:
            os.unlink(path(pid))
    except Exception:
        pass


# --- the child side ----------------------------------------------------------------------------

def record(exc, what=None):
    """In a child process: send why it failed (``exc``: its type, message and mpcompat notes;
    ``what``: the step that failed) to its parent, and return the parent's pid; None without a
    parent's channel, for an exception sent already, a KeyboardInterrupt or a SystemExit of code
    0. Never raises, prints nothing."""
    try:
        if getattr(exc, "__dict__", {}).get(_MARK) or isinstance(exc, KeyboardInterrupt) or (
                isinstance(exc, SystemExit) and exc.code in (None, 0)):
            return None
        exc.__dict__[_MARK] = True
        owner, _, where = (_parent_address() or "").partition(":")
        if not where:
            return None
        from mpcompat.diagnose.notes import notes_of, own_message
        try:
            text = own_message(exc).strip()  # without the notes 3.8-3.10 append to it
        except Exception:
            text = "<unprintable>"
        error = "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__
        fields = [str(os.getpid()), repr(time.time()), _clip(str(what), 300) if what else "",
                  _clip(error, _MAX_ERROR)] + [_clip(n, _MAX_NOTE) for n in notes_of(exc)][:8]
        # NUL-separated fields after their size: flat, so the parent's reading cannot recurse.
        body = "\0".join(f.replace("\0", " ") for f in fields).encode("utf-8", "backslashreplace")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(where.replace("@", "\0", 1) if where[0] == "@" else where)
            sock.sendall(b"%d\0" % len(body) + body)
        finally:
            sock.close()
        return int(owner)
    except Exception:
        return None


def _clip(text, size):
    return text if len(text) <= size else text[:size - 3] + "..."


# --- the parent side ---------------------------------------------------------------------------

def take(pid, keep=False):
    """In a parent: return and forget (with ``keep``, leave for a later take) the record of
    child ``pid`` (a :class:`FailureRecord`), or None. Never raises."""
    try:
        pid = int(pid)
        _read()
        return _channel.records.get(pid) if keep else _channel.records.pop(pid, None)
    except Exception:
        return None


def untaken():
    """In a parent: return and forget every record nobody took (:class:`FailureRecord`, in
    arrival order). Never raises."""
    try:
        _read()
        records, _channel.records = list(_channel.records.values()), {}
        return records
    except Exception:
        return []


def discard(pids):
    """Children ``pids`` are gone and nobody will ask why (a terminated Pool's): read the
    records waiting, then drop theirs. Never raises."""
    try:
        _read()
    except Exception:
        pass
    for pid in pids:
        _channel.records.pop(pid, None)


def _read():
    """Move the records that have arrived from this process's children into
    ``_channel.records``, in at most ``_READ_TIME`` in all: a record still arriving then is
    read by a later call. One thread reads at a time; another waits for it, within that time."""
    channel = _channel
    if channel.sock is None or channel.owner != os.getpid():
        return
    deadline = time.monotonic() + _READ_TIME
    if not channel.lock.acquire(timeout=_READ_TIME):
        return
    try:
        _accept(channel, deadline)
        for conn in list(channel.pending):
            if time.monotonic() >= deadline:
                break
            _serve(channel, conn)
    finally:
        channel.lock.release()


def _accept(channel, deadline):
    """Take the connections waiting on the socket; close at once, unread, those of strangers."""
    while time.monotonic() < deadline:
        try:
            conn, _ = channel.sock.accept()
        except OSError:  # none left (BlockingIOError), or no file descriptor left
            return
        pid, uid = _peer(conn)
        if uid not in (None, os.getuid()) or _stranger(channel, pid):
            conn.close()
        else:
            conn.setblocking(False)
            channel.pending[conn] = [pid, bytearray()]


def _peer(conn):
    """(pid, uid) of the process at the other end of ``conn``, as the kernel tells them; None
    for what it does not tell (then only this user can reach the channel's private directory,
    and a record's own pid is taken on trust)."""
    try:
        if sys.platform.startswith("linux"):
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # pid, uid, gid
            return [int.from_bytes(creds[i:i + 4], sys.byteorder, signed=True) for i in (0, 4)]
        if sys.platform == "darwin":
            return conn.getsockopt(0, 2), None  # SOL_LOCAL, LOCAL_PEERPID (macOS 10.8+)
    except OSError:
        pass
    return None, None


def _stranger(channel, pid):
    """Whether a connection from ``pid`` is to be closed unread: not a child this process
    started, while no start is under way (a child can record before its start returns) or too
    many connections wait already."""
    return pid is not None and pid not in channel.started and (
        not channel.starts or len(channel.pending) >= _MAX_PENDING)


def _serve(channel, conn):
    """Read what ``conn`` holds now; once its sender has closed it, keep the record it carries,
    if it is one, from a child this process started."""
    pid, data = channel.pending[conn]
    if not _stranger(channel, pid):
        unknown = pid is not None and pid not in channel.started  # its start has not returned
        if unknown or not _received(conn, data):
            return  # kept for a later read
        record = _parse(data)
        if record is not None:  # the sender as the kernel names it, else as it claims
            pid = record.pid = record.pid if pid is None else pid
        if record is not None and record.time >= channel.started.get(pid, time.time()):
            channel.records.pop(pid, None)
            channel.records[pid] = record
            while len(channel.records) > _MAX_KEPT:
                del channel.records[next(iter(channel.records))]
    del channel.pending[conn]
    conn.close()


def _received(conn, data):
    """Add to ``data`` what ``conn`` holds, without waiting: True once the sender has closed it
    (or it failed, or sent too much)."""
    while len(data) <= _MAX_RECORD:
        try:
            chunk = conn.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            del data[:]
            return True
        if not chunk:
            return True
        data += chunk
    return True


def _parse(data):
    """The record in ``data``, what a child sent (see :func:`record`), or None if it is not
    one: a :class:`FailureRecord`."""
    size, _, body = bytes(data).partition(b"\0")
    try:
        if len(size) > 6 or int(size) != len(body):
            return None
        pid, when, what, error, *notes = body.decode("utf-8").split("\0")
        if len(pid) > 10:  # int() of many digits is slow (before 3.11's limit)
            return None
        return FailureRecord(int(pid), float(when), what or None, error, notes[:8])
    except ValueError:  # not a number, not UTF-8, too few fields
        return None


def note_for(pids, what):
    """In a parent: :func:`describe_records` of the records of children ``pids`` (``what``:
    e.g. "Pool worker process"), taken, or None. Never raises."""
    try:
        return describe_records([r for r in (take(pid) for pid in pids) if r is not None], what)
    except Exception:
        return None


def describe_records(records, what, tally=False):
    """A note naming why each child of ``records`` failed while starting (its error, the step,
    then its notes, which carry the fix), one copy per distinct error, or None if none; then a
    line for each child that failed the same way, or with ``tally``, their count and the whole
    error (else its :meth:`~FailureRecord.headline`)."""
    from mpcompat.child_failures import exits  # loaded before a helper thread gets here
    alike = {}
    for rec in records:
        alike.setdefault(rec.alike(), []).append(rec)
    parts = []
    for first, *others in alike.values():
        lines = exits.record_lines("%s (pid %d) failed while starting: " % (what, first.pid),
                                   first, short=not tally)
        if tally and others:
            lines.append("(%d more workers failed the same way)" % len(others))
        elif not tally:
            lines += ["%s (pid %d) failed while starting the same way." % (what, rec.pid)
                      for rec in others]
        parts.append("\n".join(lines))
    return PREFIX + "\n\n".join(parts) if parts else None


# --- the exit evidence (Linux) ------------------------------------------------------------------
# Counters: the oom_kill counter of the memory cgroup the worker started in (v2 memory.events,
# v1 memory.oom_control) and /proc/vmstat's; a counter names no pid. The peak is ru_maxrss, which
# os.wait4 gives the parent that reaps it. The verdict drawn from them is exits' (oom_verdict).
# Runs in the threads of Pools and executors that start and reap workers (the fork rule): it
# imports nothing and takes no lock.

_KEPT = 10000            # workers remembered, newest kept
_CHUNK = 32768           # bytes read at once: /proc/vmstat is 4-8 KB


# pid -> what is known of each worker: since (time.monotonic() as it started), before and after
# (the oom_kill counters then and as it was reaped), peak (bytes, or None), reaper ("this
# process", "the forkserver", or None before it is reaped), verdict (exits.Verdict, once asked
# for after it was reaped). A types.SimpleNamespace: made in C, no frame of its own at each start.
workers = {}
_held = threading.local()  # reading: [pid, counters or None] inside a batch of starts
_cgroup = [None, None]  # [pid of this process, (version, directory) of its memory cgroup]


def snapshot():
    """The measures to take just before a worker starts: (time, counters). Inside
    :class:`batch`, the counters its first start read."""
    held = getattr(_held, "reading", None)
    if held is None or held[0] != os.getpid():
        return time.monotonic(), counters()
    if held[1] is None:
        held[1] = counters()
    return time.monotonic(), held[1]


class batch(object):
    """``with batch():`` the workers this thread starts in the block share one reading of the
    counters, taken as the first of them starts: a reading taken before a worker starts is a
    valid "before" for it, and a Pool or a DataLoader starting its workers reads the counters
    once, not once per worker."""

    def __enter__(self):
        self.outer = getattr(_held, "reading", None)
        if self.outer is None or self.outer[0] != os.getpid():
            _held.reading = [os.getpid(), None]
        return self

    def __exit__(self, *exc_info):
        _held.reading = self.outer


def started(pid, before):
    """Worker ``pid`` has started; ``before`` is what :func:`snapshot` returned just before."""
    try:
        workers.pop(pid, None)
        workers[pid] = types.SimpleNamespace(since=before[0], before=before[1], after=None,
                                             peak=None, reaper=None, verdict=None)
        if len(workers) > _KEPT:
            del workers[next(iter(workers))]
    except Exception:  # another thread changed the dict meanwhile: it keeps its own size
        pass


def assume_started(pid, before):
    """Worker ``pid`` started where mpcompat did not see it (a torchrun rank, which its agent
    starts with ``subprocess``), after ``before`` (what :func:`snapshot` returned) at the
    latest: its counters are compared from there. Nothing changes for a worker known."""
    if pid not in workers:
        started(pid, before)


def reaped(pid, exitcode, rusage=None, reaper="this process"):
    """Worker ``pid`` ended with ``exitcode`` and was reaped by ``reaper`` (``rusage``: what
    ``os.wait4`` gave); after a SIGKILL, the counters are read now."""
    worker = workers.get(pid)
    if worker is None:
        return
    worker.reaper = reaper
    if rusage is not None:
        # Linux and the BSDs count kilobytes, macOS bytes.
        worker.peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if exitcode == -9:
        worker.after = counters()


def peak(pid):
    """(peak resident bytes or None, who reaped worker ``pid`` or None)."""
    worker = workers.get(pid)
    return (None, None) if worker is None else (worker.peak, worker.reaper)


# --- reading the kernel's files -----------------------------------------------------------------

def read(path):
    """The bytes of the file at ``path`` (OSError if it cannot be read)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, _CHUNK)]
        # A short read of a /proc or cgroup file is its end: no second read (a fork child
        # pays for every page written, and each read allocates its buffer).
        while len(chunks[-1]) == _CHUNK:
            chunks.append(os.read(fd, _CHUNK))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def counters():
    """(((file, version, directory), oom_kill) of this process's memory cgroup, or None;
    /proc/vmstat's oom_kill, or None)."""
    cgroup = memory_cgroup()
    value = None
    if cgroup is not None:
        value = field(cgroup[0], b"oom_kill ")
    return ((cgroup, value) if value is not None else None), field("/proc/vmstat", b"oom_kill ")


def field(path, name):
    """The number after ``name`` (bytes) at the start of a line of ``path``, or None."""
    try:
        data = read(path)
    except OSError:
        return None
    at = -1 if data.startswith(name) else data.find(b"\n" + name)
    if at < 0 and not data.startswith(name):
        return None
    start = at + 1 + len(name)
    try:
        return int(data[start:start + 24].split(None, 1)[0])
    except (ValueError, IndexError):
        return None


def memory_cgroup():
    """(counter file, version, directory) of this process's memory cgroup, or None; found once
    per process."""
    if _cgroup[0] != os.getpid():
        try:
            found = _find_memory_cgroup()
        except (OSError, ValueError, IndexError):
            found = None
        _cgroup[:] = [os.getpid(), found]
    return _cgroup[1]


def _find_memory_cgroup():
    """From /proc/self/cgroup and the mounts: v1 where a ``memory`` hierarchy is mounted, else
    v2 where the unified hierarchy has the memory controller."""
    paths = {}
    for line in read("/proc/self/cgroup").decode("utf-8", "replace").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            paths.setdefault(2, path)
        elif "memory" in controllers.split(","):
            paths[1] = path
    for line in read("/proc/self/mountinfo").decode("utf-8", "replace").splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1:]
        if tail[0] == "cgroup" and 1 in paths and "memory" in tail[2].split(","):
            version, name = 1, "memory.oom_control"
        elif tail[0] == "cgroup2" and 2 in paths:
            version, name = 2, "memory.events"
        else:
            continue
        root, path = fields[3], paths[version]
        if root != "/" and not (path + "/").startswith(root + "/"):
            continue
        directory = (fields[4] + path[len(root.rstrip("/")):]).rstrip("/") or "/"
        counter = os.path.join(directory, name)
        if os.path.exists(counter):
            return counter, version, directory
    return None
