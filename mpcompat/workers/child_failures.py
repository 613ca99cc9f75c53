"""Why a child process failed while starting, told to its parent.

A child that dies before it runs its target (a spawn or forkserver child that cannot unpickle
what it was sent or import the main module, a Pool worker whose initializer raises) prints its
traceback to its own stderr; its parent only sees an exit code, or nothing (a Pool starts a new
worker). The child calls :func:`record`; the parent, once it notices the dead child, calls
:func:`take` or :func:`note_for` and names the cause in its own error.

Storage: one small JSON file per child pid in a directory of this user under the temporary
directory (``<tmp>/mpcompat-<uid>``, mode 0700, ownership checked), written atomically; old
files are pruned when a new one is written. Nothing runs at import or while all goes well.
A record names the child's parent (pid and, on Linux, its start time), so that the parent never
takes the record of an earlier process that had the same pid.
"""
import os
import sys

__all__ = ["record", "take", "note_for"]

PREFIX = "mpcompat: "
_MAX_AGE = 24 * 3600      # records older than this are pruned, and never taken
_MAX_ERROR = 2000         # characters kept of the error line
_MAX_NOTE = 8000          # characters kept of each note
_MARK = "_mpcompat_recorded"


def record(exc, what=None):
    """In a child process: store why this process failed (``exc``) for its parent.

    Keeps the exception's type and message, the mpcompat notes attached to it
    (``exc.__notes__``) and ``what`` (the step that failed, e.g. "unpickling the process object
    sent by its parent"). Does nothing outside a multiprocessing child process. Never raises,
    prints nothing; a second call for the same exception does nothing.
    """
    try:
        if getattr(exc, "__dict__", {}).get(_MARK) or not _is_child(exc):
            return
        exc.__dict__[_MARK] = True
        parent = os.getppid()
        data = {
            "pid": os.getpid(),
            "error": _clip(_error_text(exc), _MAX_ERROR),
            "notes": [_clip(n, _MAX_NOTE) for n in _notes(exc)][:8],
            "what": _clip(str(what), 300) if what else None,
            "time": _now(),
            "parent": parent,
            "parent_start": _start_ticks(parent),
        }
        _write(data)
    except Exception:
        pass


def take(pid):
    """In a parent: return and delete the record of child ``pid``, or None.

    The record is a dict ``{"pid", "error", "notes", "what", "time"}``. A record left by an
    earlier process with the same pid (another parent, or older than a day) is deleted and
    not returned. Never raises.
    """
    try:
        pid = int(pid)
        directory = _directory(create=False)
        if directory is None:
            return None
        path = os.path.join(directory, "%d.json" % pid)
        try:
            with open(path, "r") as fh:
                text = fh.read()
        except OSError:
            return None
        _remove(path)
        import json
        data = json.loads(text)
        if data.get("pid") != pid or not _from_my_child(data):
            return None
        return {"pid": pid, "error": data.get("error") or "", "notes": list(
            data.get("notes") or ()), "what": data.get("what"), "time": data.get("time")}
    except Exception:
        return None


def note_for(pids, what):
    """In a parent: a note naming why the children ``pids`` failed while starting, or None.

    ``what`` names the children (e.g. "Pool worker process"). The records of ``pids`` are taken
    (see :func:`take`). The text starts with "mpcompat: " and has, for each child with a record,
    "<what> (pid N) failed while starting: <error>", then the notes of that error (which carry
    the fix). Children that failed with the same error share one copy of the notes. Never raises.
    """
    try:
        records = [r for r in (take(pid) for pid in pids) if r is not None]
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
    except Exception:
        return None


def _first_paragraph(text):
    """The error up to its first blank line, on one line (the bootstrapping-phase error spans
    fifteen indented lines)."""
    head = text.strip().split("\n\n", 1)[0]
    return " ".join(head.split())


# --- the child side ----------------------------------------------------------------------------

def _is_child(exc):
    """Whether this process is a multiprocessing child (started by spawn, forkserver or fork)."""
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return False
    if getattr(process, "_parent_process", None) is not None:  # after Process._bootstrap
        return True
    if getattr(process.current_process(), "_inheriting", False):  # inside spawn._main
        return True
    if sys.argv[-1:] == ["--multiprocessing-fork"]:  # a spawn child before prepare()
        return True
    # spawn._main has returned through the traceback (the excepthook of a spawn child)
    tb = getattr(exc, "__traceback__", None)
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in ("_main", "spawn_main", "_serve_one") and \
                tb.tb_frame.f_globals.get("__name__") in ("multiprocessing.spawn",
                                                         "multiprocessing.forkserver"):
            return True
        tb = tb.tb_next
    return False


def _error_text(exc):
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable>"
    # The message part only: on 3.8-3.10 notes may have been appended to it.
    notes = [n for n in getattr(exc, "__notes__", None) or () if isinstance(n, str)]
    for note in reversed(notes):
        if text.endswith("\n" + note):
            text = text[:-len(note) - 1]
    text = text.strip()
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


def _notes(exc):
    notes = getattr(exc, "__notes__", None) or ()
    return [n for n in notes if isinstance(n, str) and n.startswith(PREFIX)]


def _clip(text, size):
    return text if len(text) <= size else text[:size - 3] + "..."


def _now():
    import time
    return time.time()


def _write(data):
    import json
    import tempfile
    directory = _directory(create=True)
    if directory is None:
        return
    _prune(directory)
    fd, tmp = tempfile.mkstemp(prefix=".%d." % data["pid"], suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, os.path.join(directory, "%d.json" % data["pid"]))
    except BaseException:
        _remove(tmp)
        raise


def _prune(directory):
    """Delete records (and left-over temporary files) older than a day."""
    limit = _now() - _MAX_AGE
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names[:1000]:
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_mtime < limit:
                os.remove(path)
        except OSError:
            pass


# --- the parent side ---------------------------------------------------------------------------

def _from_my_child(data):
    """Whether a record comes from a child of this process (or of its forkserver), now."""
    if not isinstance(data.get("time"), (int, float)) or data["time"] < _now() - _MAX_AGE:
        return False
    parents = [os.getpid()]
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if isinstance(server, int):
        parents.append(server)
    parent = data.get("parent")
    if parent not in parents:
        return False
    started = data.get("parent_start")
    if started is None:
        return True
    mine = _start_ticks(parent)
    return mine is None or mine == started


def _start_ticks(pid):
    """The start time of process ``pid`` in clock ticks since boot (Linux), or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read()
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except Exception:
        return None


# --- the directory -----------------------------------------------------------------------------

def _directory(create):
    """This user's directory of records, or None if it is missing or not safe to use."""
    import tempfile
    uid = getattr(os, "getuid", None)
    owner = uid() if uid is not None else None
    name = "mpcompat-%s" % (owner if owner is not None else _user_name())
    path = os.path.join(tempfile.gettempdir(), name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
    import stat
    if not stat.S_ISDIR(st.st_mode):
        return None  # a file or a symbolic link where the directory should be
    if owner is not None and (st.st_uid != owner or st.st_mode & 0o077):
        return None  # another user's, or open to others: never read or write there
    return path


def _user_name():
    for var in ("USERNAME", "USER", "LOGNAME"):
        value = os.environ.get(var)
        if value:
            return "".join(c for c in value if c.isalnum() or c in "-_.") or "user"
    return "user"


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass
