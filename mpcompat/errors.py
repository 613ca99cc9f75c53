"""Exception and warning types raised by mpcompat, and how its warnings are said: once per
process tree (recorded in ``MPCOMPAT_WARNED``, which later processes inherit), attributed to the
user's code that triggered it (the ``import torch`` line), never to a line of mpcompat.
"""
import os
import sys

WARNED_VAR = "MPCOMPAT_WARNED"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class MpcompatWarning(UserWarning):
    """A patch or reducer of mpcompat was skipped or could not do its job."""


class PatchUnavailable(RuntimeError):
    """A patch that was asked for explicitly cannot apply (the message says why)."""


# BrokenPool and WorkerLostError pickle as any exception, (type, args, __dict__): their
# fields travel in __dict__.
class BrokenPool(RuntimeError):
    """Raised by the results of a ``multiprocessing.Pool`` whose workers keep exiting with an
    error before they get any task done (``pids``, ``exitcodes``; the message ends with the
    error they recorded). The pool starts no new workers: terminate it (or leave its ``with``).
    """

    def __init__(self, message, pids=(), exitcodes=()):
        RuntimeError.__init__(self, message)
        self.pids, self.exitcodes = list(pids), list(exitcodes)


class WorkerLostError(RuntimeError):
    """Raised by the result of a ``multiprocessing.Pool`` task whose worker died running it
    (``pid``, ``exitcode``; the message names the exit code or signal and its likely cause).
    The pool goes on with a new worker: other tasks are not affected."""

    def __init__(self, message, pid=None, exitcode=None):
        RuntimeError.__init__(self, message)
        self.pid, self.exitcode = pid, exitcode


def warn(message, key=None, at=None, library=()):
    """One ``MpcompatWarning`` per process tree and ``key`` (default: the message), attributed
    to ``at`` (``(filename, line)``), else to the user's frame on the stack: the first outside
    the packages named in ``library`` too (``("multiprocessing",)``: the ``Pool()`` line, not
    the standard library's that called a patched function). Never raises: made an error
    (``python -W error``, a raising ``showwarning``), it goes to stderr."""
    try:
        from binascii import crc32
        tag = "%08x" % (crc32((key or message).encode("utf-8", "replace")) & 0xFFFFFFFF)
        said = os.environ.get(WARNED_VAR, "")
        if tag in said.split(","):
            return
        os.environ[WARNED_VAR] = "%s,%s" % (said, tag) if said else tag
        import warnings
        where = _user_frame(library) if at is None else (at[0], at[1], "mpcompat", {})
        warnings.warn_explicit(MpcompatWarning("mpcompat: " + message), MpcompatWarning, *where)
    except Exception as exc:
        line = ("%s: %s" % (type(exc).__name__, exc) if isinstance(exc, Warning)
                else "MpcompatWarning: mpcompat: %s" % message)
        try:
            if sys.stderr is not None:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # no usable stderr: the warning is lost, mpcompat stays on
            pass


def describe_exception(exc):
    """``"RuntimeError: injected (mpcompat/pickling/registry.py, line 178)"``: the error, and
    the file of mpcompat it was raised in unless the message names it (an ImportError does)."""
    text = "%s: %s" % (type(exc).__name__, exc)
    if isinstance(exc, ImportError):
        return text
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    filename, line = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else ("", 0)
    if isinstance(exc, SyntaxError):
        filename, line = exc.filename or "", exc.lineno
    if filename.startswith(_PACKAGE_DIR) and os.path.basename(filename) not in text:
        where = "mpcompat" + filename[len(_PACKAGE_DIR):].replace(os.sep, "/")
        text += " (%s, line %s)" % (where, line)
    return text


def _user_frame(library=()):
    """``(filename, lineno, module, registry)`` of the first frame outside mpcompat, its hook,
    the import system, modules still being imported (a library importing another: the line
    that imported the first) and the packages named in ``library`` (the innermost of theirs if
    nothing called them); at interpreter start, none."""
    frame, inner = sys._getframe(1), None
    while frame is not None:
        filename = frame.f_code.co_filename
        name = frame.f_globals.get("__name__")
        spec = frame.f_globals.get("__spec__")
        if not (filename.startswith(_PACKAGE_DIR) or filename.startswith("<frozen ")
                or name in ("_mpcompat_bootstrap", "site", "sitecustomize")
                or os.path.basename(os.path.dirname(filename)) == "importlib"
                or getattr(spec, "_initializing", False)):
            if str(name).partition(".")[0] not in library:
                break
            inner = inner or frame
        frame = frame.f_back
    frame = frame or inner
    if frame is None:
        return "<mpcompat at interpreter start>", 0, "mpcompat", {}
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals.get("__name__") or "?", \
        registry
