"""Why a child process failed while starting, told to its parent.

A child that dies before it runs its target (a spawn or forkserver child that cannot unpickle
what it was sent or import the main module, a Pool worker whose initializer raises) prints its
traceback to its own stderr; its parent only sees an exit code, or nothing (a Pool starts a new
worker). The child calls :func:`record`; the parent, once it notices the dead child, calls
:func:`take` or :func:`note_for` and names the cause in its own error.

The channel is a listening Unix socket the parent owns, opened by :func:`listen` before it
starts its first child (the ``multiprocessing.failure_records`` patch calls it from
``Process.start``). Its address reaches spawn and forkserver children in the preparation data
multiprocessing sends them (:func:`preparation_key`, read back by :func:`heard_from_parent`);
fork children inherit it with the memory. The environment is left alone. A child connects,
writes one JSON record and closes; the record waits in the kernel, in the connection not yet
accepted, until the parent reads it.
- Linux: an abstract socket (no file at all); the kernel gives the sender's pid and uid
  (``SO_PEERCRED``), and a record is kept only from a process of this user whose pid is the one
  it names and whose parent is this process or its forkserver.
- Other Unix systems: a socket file in a private directory (mode 0700) that the parent removes
  at exit. Windows: no channel; the child's stderr is the only report.
Nothing runs at import or while all goes well, and nothing is left on disk once the parent ends.
"""
import os
import sys

__all__ = ["listen", "address", "heard_from_parent", "record", "take", "forget", "discard",
           "note_for", "describe"]

PREFIX = "mpcompat: "
KEY = "mpcompat_failure_channel"  # in the preparation data of spawn and forkserver children
_MAX_ERROR = 2000         # characters kept of the error line
_MAX_NOTE = 8000          # characters kept of each note
_MAX_KEPT = 1000          # records read but not yet taken, newest kept
_MARK = "_mpcompat_recorded"


class _Channel(object):
    """This process's listening socket and the records read from it, not yet taken."""

    def __init__(self):
        self.owner = None      # pid of the process that opened ``sock``
        self.sock = None
        self.address = None    # where ``sock`` listens, "<owner pid>:<address>"
        self.directory = None  # the socket file's directory (not on Linux)
        self.records = {}      # pid -> record, in arrival order
        self.parent = None     # a fork child's: the channel it inherited from its parent
        self.told = None       # (pid, address): what a spawn or forkserver child was told


_channel = _Channel()


def listen():
    """In a parent about to start a child: open this process's channel, or read the records
    waiting on it (one system call when there are none), so that :func:`forget` can tell them
    from the new child's. Never raises."""
    try:
        if _channel.owner == os.getpid():
            _read()
        else:
            _open()
    except Exception:
        pass


def _open():
    import socket
    family = getattr(socket, "AF_UNIX", None)
    if family is None:
        return
    sock = socket.socket(family, socket.SOCK_STREAM)
    directory = None
    try:
        if sys.platform.startswith("linux"):
            address = "\0mpcompat-%d-%s" % (os.getpid(), os.urandom(8).hex())
        else:
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
    old = _channel.sock  # ours, or the parent's inherited by fork: not read here
    if _channel.owner is not None and _channel.owner != os.getpid():
        _channel.parent = _channel.address  # a fork child: its parent's, inherited
    _channel.owner, _channel.sock, _channel.directory = os.getpid(), sock, directory
    _channel.records = {}
    if old is not None:
        old.close()
    import atexit
    atexit.register(_close, os.getpid())
    _channel.address = "%d:%s" % (os.getpid(), address.replace("\0", "@", 1))


def address():
    """This process's channel ("<pid>:<address>") for the children it starts, or None."""
    return _channel.address if _channel.owner == os.getpid() else None


def heard_from_parent(value):
    """In a spawn or forkserver child: ``value`` is the parent's channel, from the preparation
    data its parent sent (see :func:`address`)."""
    if isinstance(value, str) and value:
        _channel.told = (os.getpid(), value)


def _parent_address():
    told = _channel.told
    if told is not None and told[0] == os.getpid():
        # What the parent said wins over a channel that came with a fork: a forkserver that
        # opened one of its own while importing the main module forks its children with it.
        return told[1]
    if _channel.owner is not None and _channel.owner != os.getpid():
        return _channel.address  # a fork child: the parent's channel came with the memory
    return _channel.parent


def _close(owner):
    if _channel.owner == owner == os.getpid():
        _channel.sock.close()
        _remove_directory(_channel.directory)


def _remove_directory(directory):
    if directory:
        import shutil
        shutil.rmtree(directory, ignore_errors=True)


# --- the child side ----------------------------------------------------------------------------

def record(exc, what=None):
    """In a child process: send why this process failed (``exc``) to its parent.

    Sends the exception's type and message, the mpcompat notes attached to it
    (``exc.__notes__``) and ``what`` (the step that failed, e.g. "unpickling the process object
    sent by its parent"). Returns the parent's pid once the record is on its way, None when
    there is no parent to tell (no channel reached this process from a parent) or on a second
    call for the same exception. Never raises, prints nothing.
    """
    try:
        if getattr(exc, "__dict__", {}).get(_MARK):
            return None
        exc.__dict__[_MARK] = True
        owner, _, where = (_parent_address() or "").partition(":")
        if not where:
            return None
        import json
        import socket
        import time
        from mpcompat.diagnose.notes import notes_of
        data = {
            "pid": os.getpid(),
            "error": _clip(_error_text(exc), _MAX_ERROR),
            "notes": [_clip(n, _MAX_NOTE) for n in notes_of(exc)][:8],
            "what": _clip(str(what), 300) if what else None,
            "time": time.time(),
            "parent": os.getppid(),
        }
        payload = json.dumps(data).encode("utf-8")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(where.replace("@", "\0", 1) if where[0] == "@" else where)
            sock.sendall(payload)
        finally:
            sock.close()
        return int(owner)
    except Exception:
        return None


def _error_text(exc):
    """``"Type: message"``, the message without the notes 3.8-3.10 append to it."""
    from mpcompat.diagnose.notes import own_message
    try:
        text = own_message(exc).strip()
    except Exception:
        text = "<unprintable>"
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


def _clip(text, size):
    return text if len(text) <= size else text[:size - 3] + "..."


# --- the parent side ---------------------------------------------------------------------------

def take(pid):
    """In a parent: return and forget the record of child ``pid``, or None.

    The record is a dict ``{"pid", "error", "notes", "what", "time"}``. Never raises.
    """
    try:
        pid = int(pid)
        _read()
        data = _channel.records.pop(pid, None)
        if data is None:
            return None
        return {"pid": pid, "error": data.get("error") or "", "notes": list(
            data.get("notes") or ()), "what": data.get("what"), "time": data.get("time")}
    except Exception:
        return None


def forget(pid):
    """In a parent that has just started child ``pid`` (after :func:`listen`): drop a record
    left by an earlier child with the same pid, so that it is never taken for this one. Reads
    nothing new: the new child's own record may be waiting already. Never raises."""
    try:
        _channel.records.pop(int(pid), None)
    except Exception:
        pass


def discard(pids):
    """Children ``pids`` are gone and nobody will ask why (their Pool was terminated): read the
    records waiting, then drop theirs. Never raises."""
    try:
        _read()
    except Exception:
        pass
    for pid in pids:
        forget(pid)


def _read():
    """Move the records waiting on this process's channel into ``_channel.records``."""
    sock = _channel.sock
    if sock is None or _channel.owner != os.getpid():
        return
    parents = _parents()
    while True:
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            data = _receive(conn)
        finally:
            conn.close()
        if data is not None and data.get("parent") in parents:
            records = _channel.records
            records.pop(data["pid"], None)
            records[data["pid"]] = data
            while len(records) > _MAX_KEPT:
                del records[next(iter(records))]


def _receive(conn):
    """The record a connection carries, or None if it is not a record from our children."""
    import json
    import socket
    peer = None
    if hasattr(socket, "SO_PEERCRED"):
        import struct
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            return None
    conn.settimeout(1.0)
    chunks = []
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(len(c) for c in chunks) > 200000:
                return None
        data = json.loads(b"".join(chunks).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    if peer is not None and peer != data["pid"]:
        return None
    return data


def _parents():
    """The pids a record may name as its parent: this process and its forkserver."""
    parents = [os.getpid()]
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if isinstance(server, int):
        parents.append(server)
    return parents


def note_for(pids, what):
    """In a parent: a note naming why the children ``pids`` failed while starting, or None.

    ``what`` names the children (e.g. "Pool worker process"). The records of ``pids`` are taken
    (see :func:`take`). The text starts with "mpcompat: " and has, for each child with a record,
    "<what> (pid N) failed while starting: <error>", then the notes of that error (which carry
    the fix). Children that failed with the same error share one copy of the notes. Never raises.
    """
    try:
        records = [r for r in (take(pid) for pid in pids) if r is not None]
        return describe(records, what)
    except Exception:
        return None


def describe(records, what):
    """The note :func:`note_for` makes of ``records`` already taken, or None if there are none."""
    if not records:
        return None
    lines, seen = [], {}
    for rec in records:
        key = (rec["error"], tuple(rec["notes"]), rec["what"])
        if key in seen:
            lines.append("%s (pid %d) failed while starting the same way." % (
                what, rec["pid"]))
            continue
        seen[key] = rec["pid"]
        if lines:
            lines.append("")
        lines.append("%s (pid %d) failed while starting: %s" % (
            what, rec["pid"], _first_paragraph(rec["error"])))
        if rec["what"]:
            lines.append("(while %s)" % rec["what"])
        for note in rec["notes"]:
            lines.append(note)
    return PREFIX + "\n".join(lines)


def _first_paragraph(text):
    """The error up to its first blank line, on one line (the bootstrapping-phase error spans
    fifteen indented lines)."""
    head = text.strip().split("\n\n", 1)[0]
    return " ".join(head.split())
