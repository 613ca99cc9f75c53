"""Why a child process failed while starting, told to its parent.

A child that dies before it runs its target (it cannot unpickle what it was sent or import the
main module, a Pool initializer raises) calls :func:`record`; its parent, noticing the dead
child, calls :func:`take` or :func:`note_for` and names the cause in its own error.

The channel is a listening Unix socket the parent opens (:func:`listen`) before its first child
starts; spawn and forkserver children get its address in their preparation data, fork children
inherit it. A child connects, writes one JSON record and closes; the record waits in the kernel
until the parent reads it. On Linux the socket is abstract and a record is kept only from a
process of this user (``SO_PEERCRED``) with the pid it names, whose parent is this process or
its forkserver; elsewhere on Unix it is a file in a private directory removed at exit; Windows
has no channel. Nothing runs at import.
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
    """This process's listening socket (``address``: "<owner pid>:<socket address>"), the
    records read, not yet taken (``records``: pid -> record, in arrival order); ``parent``: the
    channel a fork child inherited; ``told``: (pid, address) a spawn or forkserver child got."""
    owner = sock = address = directory = parent = told = None


_channel = _Channel()
_channel.records = {}


def listen():
    """Before starting a child: open this process's channel, or read the records waiting on it.
    Never raises."""
    try:
        if _channel.owner == os.getpid():
            _read()
        else:
            _open()
    except Exception:
        pass


def _open():
    import socket
    if not hasattr(socket, "AF_UNIX"):
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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
    old = _channel.sock  # the parent's, inherited by fork: not read here
    if _channel.owner is not None:
        _channel.parent = _channel.address
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


def heard_from_parent(data):
    """In a spawn or forkserver child: ``data``, the preparation data its parent sent, may name
    the parent's channel (see :func:`address`)."""
    value = data.get(KEY) if isinstance(data, dict) else None
    if isinstance(value, str) and value:
        _channel.told = (os.getpid(), value)


def _parent_address():
    told = _channel.told
    if told is not None and told[0] == os.getpid():
        # It wins over a channel that came with a fork: a forkserver that opened one while
        # importing the main module forks its children with it.
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
        import json
        import socket
        import time
        from mpcompat.diagnose.notes import notes_of, own_message
        try:
            text = own_message(exc).strip()  # without the notes 3.8-3.10 append to it
        except Exception:
            text = "<unprintable>"
        error = "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__
        payload = json.dumps({
            "pid": os.getpid(),
            "error": _clip(error, _MAX_ERROR),
            "notes": [_clip(n, _MAX_NOTE) for n in notes_of(exc)][:8],
            "what": _clip(str(what), 300) if what else None,
            "time": time.time(),
            "parent": os.getppid(),
        }).encode("utf-8")
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


def _clip(text, size):
    return text if len(text) <= size else text[:size - 3] + "..."


# --- the parent side ---------------------------------------------------------------------------

def take(pid):
    """In a parent: return and forget the record of child ``pid`` (a dict ``{"pid", "error",
    "notes", "what", "time"}``), or None. Never raises."""
    try:
        pid = int(pid)
        _read()
        data = _channel.records.pop(pid, None)
        return None if data is None else {
            "pid": pid, "error": data.get("error") or "", "notes": list(data.get("notes") or ()),
            "what": data.get("what"), "time": data.get("time")}
    except Exception:
        return None


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
    """Move the records waiting on this process's channel into ``_channel.records``."""
    sock = _channel.sock
    if sock is None or _channel.owner != os.getpid():
        return
    parents = [os.getpid()]  # the parents a record may name: this process and its forkserver
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if isinstance(server, int):
        parents.append(server)
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
    try:
        with conn.makefile("rb") as stream:
            raw = stream.read(200001)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= 200000 else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    return data if peer is None or peer == data["pid"] else None


def note_for(pids, what):
    """In a parent: :func:`describe` of the records of children ``pids`` (``what`` names them,
    e.g. "Pool worker process"), taken, or None. Never raises."""
    try:
        return describe([r for r in (take(pid) for pid in pids) if r is not None], what)
    except Exception:
        return None


def describe(records, what, tally=False):
    """A note naming why each child of ``records`` failed while starting (its error, the step,
    then its notes, which carry the fix), one copy per distinct error, or None if none; then a
    line for each child that failed the same way, or with ``tally``, their count and the whole
    error (else up to its first blank line, on one line: the bootstrapping-phase error spans
    fifteen indented lines)."""
    from mpcompat.workers.exits import record_lines
    alike = {}
    for rec in records:
        alike.setdefault((rec["error"], tuple(rec["notes"]), rec["what"]), []).append(rec)
    parts = []
    for first, *others in alike.values():
        if not tally:
            first = dict(first, error=" ".join(first["error"].strip().split("\n\n", 1)[0].split()))
        lines = record_lines("%s (pid %d) failed while starting: " % (what, first["pid"]), first)
        if tally and others:
            lines.append("(%d more workers failed the same way)" % len(others))
        elif not tally:
            lines += ["%s (pid %d) failed while starting the same way." % (what, rec["pid"])
                      for rec in others]
        parts.append("\n".join(lines))
    return PREFIX + "\n\n".join(parts) if parts else None
