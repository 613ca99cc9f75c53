"""Why a child process failed while starting, told to its parent.

A child that dies before it runs its target (it cannot unpickle what it was sent or import the
main module, a Pool initializer raises) calls :func:`record`; its parent, noticing the dead
child, calls :func:`take` or :func:`note_for` and names the cause in its own error.

The channel is a listening Unix socket the parent opens (:func:`listen`) before its first child
starts; spawn and forkserver children get its address in their preparation data, fork children
inherit it. A child connects, writes one record and closes; the record waits in the kernel until
the parent reads it. The parent reads only the children it started (:func:`started`), as the
kernel names the sender (``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID`` on macOS), closes any
other connection unread, and never waits for a slow sender. On Linux the socket is abstract;
elsewhere on Unix it is a file in a private directory removed at exit; Windows has no channel.

The parent's side runs in the helper threads of Pools and executors: all it needs is imported
here, or with the ``failure_records`` patch (:mod:`mpcompat.child_failures.exits`, but in a
spawn child starting up, which needs none of it: :func:`spawn_child_starting`), never in them (a
fork child made meanwhile would inherit the held import lock). Nothing runs at import.
"""
import collections
import os
import socket
import struct
import sys
import threading
import time

PREFIX = "mpcompat: "
KEY = "mpcompat_failure_channel"  # in the preparation data of spawn and forkserver children
NAMED = "mpcompat_failure_named"  # there too: whether the parent names the child's start-up error
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
    started (``started``: pid -> the time its start began), the connections not read to the end
    (``pending``: connection -> [sender's pid, bytes so far]), the starts under way (``starts``:
    the times they began);
    ``lock``: held by the thread that reads; ``parent``: the channel a fork child inherited;
    ``told``: (pid, address, who names its error) a spawn or forkserver child got."""
    owner = sock = address = directory = parent = told = lock = None

    def __init__(self):
        self.empty()

    def empty(self):
        """Forget the records, the children, the connections and the starts."""
        self.records, self.started, self.pending, self.starts = \
            {}, collections.OrderedDict(), {}, []


_channel = _Channel()


def listen():
    """Before starting a child: open this process's channel if it has none. Never raises."""
    try:
        if _channel.owner != os.getpid():
            _open()
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
    # that fails meanwhile still reaches the channel, and the records left untaken can be named
    # (finalizers of higher priority run first: mp_failure_records').
    from multiprocessing import util
    util.Finalize(None, _close, args=(os.getpid(),), exitpriority=CLOSE_PRIORITY)
    _channel.address = "%d:%s" % (os.getpid(), address.replace("\0", "@", 1))


def address():
    """This process's channel ("<pid>:<address>") for the children it starts, or None."""
    return _channel.address if _channel.owner == os.getpid() else None


def heard_from_parent(data):
    """In a spawn or forkserver child: ``data``, the preparation data its parent sent, may name
    the parent's channel (see :func:`address`), and who names this child's start-up error
    (``NAMED``)."""
    value = data.get(KEY) if isinstance(data, dict) else None
    if isinstance(value, str) and value:
        _channel.told = (os.getpid(), value, data.get(NAMED))


def named_by():
    """In a spawn or forkserver child: who names its start-up error, as its parent said:
    ``BY_OWNER`` or ``BY_NOBODY``; None without a parent's channel."""
    told = _channel.told
    if told is None or told[0] != os.getpid():
        return None
    return BY_OWNER if told[2] == BY_OWNER else BY_NOBODY


def _parent_address():
    told = _channel.told
    if told is not None and told[0] == os.getpid():
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

def spawn_child_starting():
    """Whether this process is a spawn or forkserver child that has not run its target yet: it
    needs none of a parent's side (:mod:`mpcompat.child_failures.exits`), which the patches load in
    every other process (``--multiprocessing-fork`` in the argv until ``spawn.prepare`` sets the
    parent's, then ``_inheriting`` while it unpickles its process object)."""
    if sys.argv[1:2] == ["--multiprocessing-fork"]:
        return True
    process = sys.modules.get("multiprocessing.process")
    return bool(process and getattr(process.current_process(), "_inheriting", False))


def starting():
    """Just before starting a child: until the matching :func:`started`, a connection from a
    process not known yet is kept unread, not closed (the child may record before its start
    returns). Returns the time it was called, for :func:`started`."""
    since = time.time()
    _channel.starts.append(since)
    return since


def started(pid, since=0.0):
    """Just after starting child ``pid`` (None if the start failed), with what the matching
    :func:`starting` returned: records from ``pid`` sent since then are accepted from now on (an
    earlier child with that pid sent its own before). Never raises."""
    try:
        if since in _channel.starts:
            _channel.starts.remove(since)
        if pid is not None:
            children = _channel.started
            children[int(pid)] = since
            children.move_to_end(int(pid))
            if len(children) > _MAX_STARTED:
                children.popitem(last=False)
            forget(pid)
    except Exception:
        pass


def take(pid):
    """In a parent: return and forget the record of child ``pid`` (a :class:`FailureRecord`),
    or None. Never raises."""
    try:
        pid = int(pid)
        _read()
        return _channel.records.pop(pid, None)
    except Exception:
        return None


def peek(pid):
    """In a parent: the record of child ``pid``, left for :func:`take`, or None. Never
    raises."""
    try:
        pid = int(pid)
        _read()
        return _channel.records.get(pid)
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


def forget(pid):
    """In a parent that has just started child ``pid`` (after :func:`listen`): drop a record
    an earlier child with that pid left, reading nothing new. Never raises."""
    try:
        _channel.records.pop(int(pid), None)
    except Exception:
        pass


def discard(pids):
    """Children ``pids`` are gone and nobody will ask why (a terminated Pool's): read the
    records waiting, then drop theirs. Never raises."""
    try:
        _read()
    except Exception:
        pass
    for pid in pids:
        forget(pid)


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
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            return struct.unpack("3i", creds)[:2]
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
    from mpcompat.child_failures import exits  # loaded already, but in a spawn child starting up
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
