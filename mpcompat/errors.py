"""Exception and warning types raised by mpcompat, and how its warnings are said.

A warning is for something the user must act on, and a process tree says it once: the
process that first meets it warns and records that in ``MPCOMPAT_WARNED`` (inherited by the
processes it starts later, which stay quiet about it). The warning is attributed to the
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


class BrokenPool(RuntimeError):
    """Raised by the results of a ``multiprocessing.Pool`` whose worker processes keep exiting
    with an error before they get any task done (the ``multiprocessing.pool_workers`` patch).

    ``pids`` and ``exitcodes`` are those of the workers that failed; the message ends with their
    own error (the ``mpcompat:`` note) where they recorded it. The pool starts no new workers:
    terminate it (or leave its ``with`` block).
    """

    def __init__(self, message, pids=(), exitcodes=()):
        RuntimeError.__init__(self, message)
        self.pids, self.exitcodes = list(pids), list(exitcodes)

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.pids, self.exitcodes),
                self.__dict__)


class WorkerLostError(RuntimeError):
    """Raised by the result of a ``multiprocessing.Pool`` task whose worker process died while
    running it (the ``multiprocessing.pool_workers`` patch). ``pid`` and ``exitcode`` are the
    worker's; the message names the exit code or signal and its likely cause. The pool goes on
    with a new worker: other tasks are not affected.
    """

    def __init__(self, message, pid=None, exitcode=None):
        RuntimeError.__init__(self, message)
        self.pid, self.exitcode = pid, exitcode

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.pid, self.exitcode),
                self.__dict__)


def warn(message, key=None):
    """One ``MpcompatWarning``, once per process tree (``key`` decides what counts as the same
    warning, default the message).

    A warning never raises and never turns mpcompat off. When a warnings filter makes it an
    error (``python -W error``, ``PYTHONWARNINGS=error``), or a ``warnings.showwarning`` hook
    raises, it is written to stderr instead, as ``MpcompatWarning: mpcompat: <message>``
    (still once per process tree), and mpcompat carries on.
    """
    try:
        warn_once(message, key)
    except Exception as exc:
        line = ("%s: %s" % (type(exc).__name__, exc) if isinstance(exc, Warning)
                else "MpcompatWarning: mpcompat: %s" % message)
        try:
            if sys.stderr is not None:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # no usable stderr: the warning is lost, mpcompat stays on
            pass


def warn_once(message, key=None):
    """Warn with ``message`` unless this process or an ancestor already did; return whether it
    warned. ``key`` (default: the message) decides what counts as the same warning."""
    from binascii import crc32
    tag = "%08x" % (crc32((key or message).encode("utf-8", "replace")) & 0xFFFFFFFF)
    said = os.environ.get(WARNED_VAR, "")
    if tag in said.split(","):
        return False
    os.environ[WARNED_VAR] = "%s,%s" % (said, tag) if said else tag
    import warnings
    filename, lineno, module, registry = _user_frame()
    warnings.warn_explicit(MpcompatWarning("mpcompat: " + message), MpcompatWarning, filename,
                           lineno, module, registry)
    return True


def describe(exc):
    """``"RuntimeError: injected (mpcompat/pickling/registry.py, line 178)"``: the error, and
    the file of mpcompat it was raised in when its message does not name it already (an
    ImportError names its module)."""
    text = "%s: %s" % (type(exc).__name__, exc)
    if isinstance(exc, ImportError):
        return text
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename if tb is not None else ""
    if isinstance(exc, SyntaxError):
        filename, line = exc.filename or "", exc.lineno
    else:
        line = tb.tb_lineno if tb is not None else 0
    if filename.startswith(_PACKAGE_DIR) and os.path.basename(filename) not in text:
        where = "mpcompat" + filename[len(_PACKAGE_DIR):].replace(os.sep, "/")
        text += " (%s, line %s)" % (where, line)
    return text


def _user_frame():
    """Where the user's code called into what led here: the first frame outside mpcompat, its
    start-up hook, the import system and modules still being imported (a library importing
    another: the line to show is the one that imported the first); at interpreter start, none."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        name = frame.f_globals.get("__name__")
        spec = frame.f_globals.get("__spec__")
        if not (filename.startswith(_PACKAGE_DIR) or filename.startswith("<frozen ")
                or name in ("_mpcompat_bootstrap", "site", "sitecustomize")
                or os.path.basename(os.path.dirname(filename)) == "importlib"
                or getattr(spec, "_initializing", False)):
            registry = frame.f_globals.setdefault("__warningregistry__", {})
            return filename, frame.f_lineno, name or "?", registry
        frame = frame.f_back
    return "<mpcompat at interpreter start>", 0, "mpcompat", {}
