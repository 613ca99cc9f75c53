"""Patch ``torch.elastic_errors``: in a torchrun rank, an uncaught exception writes the error
file that torch's ``@record`` would write, mpcompat's notes included (patches.md).

torch's agent sets ``TORCHELASTIC_ERROR_FILE`` for each rank it starts and reads that file when
the rank fails: its "Root Cause" summary shows the file's ``message`` and ``py_callstack``, in
``ErrorHandler.record_exception``'s JSON. Only an entrypoint decorated with ``@record`` writes it.
For every other script a chained ``sys.excepthook`` writes it (torch's c10d hook wraps it when
``init_process_group`` runs later), and an exit handler does where a hook set later by the user
displaced it (Python keeps the uncaught exception as ``sys.last_value``); neither writes over a
file that is there already (``@record`` wrote it first). It applies as mpcompat activates in a
process that has the variable set (its target is ``sys``); torch is never imported for it.
It also arms the rank's crash file, which its agent named
(``mp_children.arm_inherited``): a native crash leaves the rank's Python stack there for
the agent's summary.
"""
import atexit
import os
import sys

from mpcompat.patcher import ExceptHooks, NotNeeded

ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
hooks = ExceptHooks()


class _ExceptHook(object):
    """A ``sys.excepthook`` that writes the rank's error file, then calls the previous hook
    (torch's c10d hook wraps this one when ``init_process_group`` runs after it)."""

    def __init__(self, previous):
        self.previous = previous
        self.active = True
        self.pid = os.getpid()  # the rank's: a child forked from it writes no file

    def __call__(self, etype, value, tb):
        if self.active and isinstance(value, Exception) and self.pid == os.getpid():
            write_error_file(value)
        return (self.previous or sys.__excepthook__)(etype, value, tb)


def error_data(exc):
    """The JSON ``ErrorHandler.record_exception`` writes for ``exc``, its ``message`` with the
    notes of ``exc`` (mpcompat's cause) and its ``py_callstack`` without mpcompat's frames."""
    import time
    from mpcompat.diagnose.notes import own_message
    from mpcompat.workers.user_frames import format_trimmed
    notes = [n for n in getattr(exc, "__notes__", None) or () if isinstance(n, str)]
    message = "\n".join(["%s: %s" % (type(exc).__name__, own_message(exc))] + notes)
    return {"message": {"message": message,
                        "extraInfo": {"py_callstack": format_trimmed(exc),
                                      "timestamp": str(int(time.time()))}}}


def write_error_file(exc):
    """Write the error file of this rank for ``exc`` unless it exists already. Never raises."""
    path = os.environ.get(ERROR_FILE_VAR, "")
    try:
        if not path:
            return
        import json  # imported only by a failing rank
        text = json.dumps(error_data(exc))
    except Exception:
        return
    # Written whole beside it, then linked into place: the agent, which may SIGTERM this rank
    # at any moment, never reads a half-written file, and nothing written before is replaced.
    partial = "%s.%d.partial" % (path, os.getpid())
    try:
        with open(partial, "w") as stream:
            stream.write(text)
        os.link(partial, path)
    except FileExistsError:  # @record wrote it
        pass
    except Exception:  # no hard links here: written in place, never over an existing file
        try:
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as out:
                out.write(text)
        except Exception:  # torch's own message, then
            pass
    finally:
        try:
            os.unlink(partial)
        except OSError:
            pass


def _at_exit():
    """The uncaught exception that ends this process, if a hook set after ours handled it."""
    if hooks.active(os.getpid()):
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if isinstance(exc, Exception):
            write_error_file(exc)


atexit.register(_at_exit)  # a no-op unless a hook is active


def apply(module):
    """Install the excepthook (``module`` is ``sys``), chained to the one in place; not in a
    spawn child (a DataLoader worker inherits the variable, but the error file is the rank's;
    its argv says so only until ``spawn.prepare`` sets the parent's)."""
    if (getattr(module, "argv", None) or [])[1:2] == ["--multiprocessing-fork"]:
        raise NotNeeded("a multiprocessing child of the rank, not the rank")
    hooks.install(_ExceptHook)
    from mpcompat.patches import mp_children
    mp_children.arm_inherited()


def revert(module):
    """Turn the excepthook off (removed where it is still the one in place)."""
    hooks.remove()
