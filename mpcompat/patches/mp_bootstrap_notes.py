"""Patch ``multiprocessing.bootstrap_notes``: a child that fails while starting says why, and
its parent can learn it (patches.md).

``spawn._check_not_importing_main`` (no main guard) gains a note with the line and the fix;
what kills a spawn or forkserver child inside ``spawn._main`` gains the main-guard note and is
recorded for the parent. Where mpcompat is activated while ``spawn._main`` already runs (the
script's own ``import mpcompat``), a chained ``sys.excepthook`` does that instead.
"""
import functools
import os
import sys

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import Skip

patcher = Patcher()
_DONE = "_mpcompat_start_failure"
_hooks = []  # the excepthooks installed in this process (at most one is active)


def _hooked(original, errors, on_error):
    """``original``, calling ``on_error(exc)`` for an error of type ``errors`` it raises; when
    that returns a line, the line is printed instead of the traceback, and the process exits
    with code 1."""
    @functools.wraps(original)
    def hooked(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except errors as exc:
            line = None
            try:
                line = on_error(exc)
            except Exception:
                pass
            if not line:
                raise
        _print(line)
        raise SystemExit(1)  # spawn_main exits with it; a forkserver child exits 1 in any case
    return hooked


def _print(line):
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except Exception:
        pass


def _bootstrap_failed(exc):
    """The main-guard note on ``exc``; in a forkserver importing the main module (which dies of
    it before Python 3.15), the one line it prints instead of its traceback: the process that
    started it names the cause and the fix when it cannot reach it."""
    from mpcompat.diagnose.notes import bootstrap_failed, one_line
    bootstrap_failed(exc)
    if sys.version_info < (3, 15) and _in_forkserver_start():
        return "mpcompat: the forkserver process (pid %d) failed while starting: %s; the " \
               "process that started it reports it\n" % (os.getpid(), one_line(exc))
    return None


def _in_forkserver_start():
    """Whether this process is a forkserver importing the main module as it starts."""
    # A frame read: nothing else says that forkserver.main itself runs this import (its
    # children run their own import from forkserver.main too, through spawn._main).
    frame = sys._getframe(1)
    while frame is not None:
        caller = frame.f_back
        if frame.f_code.co_name == "import_main_path" and caller is not None and \
                caller.f_code.co_name == "main" and \
                caller.f_globals.get("__name__") == "multiprocessing.forkserver":
            return True
        frame = caller
    return False


def start_failed(exc):
    """``exc`` is killing this child while ``spawn._main`` starts it: note what is known, and
    record it for the parent (``mpcompat.workers.child_failures``). Returns the one line to
    print instead of the traceback when the parent got the record (it reports the cause once,
    for all its children that failed alike), else None. Never raises."""
    try:
        if exc.__dict__.get(_DONE):
            return None
        exc.__dict__[_DONE] = True
        from mpcompat.diagnose.notes import note_missing_attribute, told_parent
        from mpcompat.patches.mp_failure_records import step
        from mpcompat.workers import child_failures
        note_missing_attribute(exc)
        parent = child_failures.record(exc, what=step())
        return None if parent is None else told_parent(exc, parent)
    except Exception:
        return None


class _ExceptHook(object):
    """A ``sys.excepthook`` that handles a start-up failure, then calls the previous hook."""

    def __init__(self, previous):
        self.previous = previous
        self.active = True

    def __call__(self, etype, value, tb):
        if self.active and isinstance(value, Exception) and \
                sys.modules["multiprocessing.process"]._parent_process is None:
            # before Process._bootstrap, which reports what it runs itself
            line = start_failed(value)
            if line:
                return _print(line)
        return (self.previous or sys.__excepthook__)(etype, value, tb)


def apply(module):
    """Hook ``_check_not_importing_main`` and ``_main`` of ``module`` (``multiprocessing.spawn``);
    in a child that is starting up right now, also install the excepthook."""
    if not callable(module.__dict__.get("_check_not_importing_main")) or \
            not callable(module.__dict__.get("_main")):
        raise Skip("multiprocessing.spawn has no _check_not_importing_main() or _main()")
    for name, errors, on_error in (("_check_not_importing_main", RuntimeError, _bootstrap_failed),
                                   ("_main", Exception, start_failed)):
        patcher.replace(module, name, _hooked(patcher.original(module, name), errors, on_error))
    if getattr(module.process.current_process(), "_inheriting", False) and \
            not any(h.active for h in _hooks):
        _hooks.append(_ExceptHook(sys.excepthook))
        sys.excepthook = _hooks[-1]


def revert(module):
    """Put back the originals where ours are in place; turn the excepthook off (removed where
    it is still the one in place)."""
    patcher.restore(module)
    for hook in _hooks[::-1]:
        hook.active = False
        if sys.excepthook is hook:
            sys.excepthook = hook.previous
            _hooks.remove(hook)
