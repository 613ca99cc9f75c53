"""Patch ``multiprocessing.bootstrap_notes``: a child that fails while starting says why, and
its parent can learn it (patches.md).

``spawn._check_not_importing_main`` (no main guard) gains a note with the line and the fix;
what kills a spawn or forkserver child inside ``spawn._main`` gains the main-guard note and is
recorded for the parent. Where mpcompat is activated while ``spawn._main`` already runs (the
script's own ``import mpcompat``), a chained ``sys.excepthook`` does that instead.
"""
import functools
import sys

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import Skip

patcher = Patcher()
_DONE = "_mpcompat_start_failure"
_hooks = []  # the excepthooks installed in this process (at most one is active)


def _hooked(original, errors, on_error):
    """``original``, calling ``on_error(exc)`` for an error of type ``errors`` it raises."""
    @functools.wraps(original)
    def hooked(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except errors as exc:
            try:
                on_error(exc)
            except Exception:
                pass
            raise
    return hooked


def _bootstrap_failed(exc):
    from mpcompat.diagnose.notes import bootstrap_failed
    bootstrap_failed(exc)


def start_failed(exc):
    """``exc`` is killing this child while ``spawn._main`` starts it: note what is known, and
    record it for the parent (``mpcompat.workers.child_failures``). Never raises."""
    try:
        if exc.__dict__.get(_DONE):
            return
        exc.__dict__[_DONE] = True
        from mpcompat.diagnose.notes import note_missing_attribute, notes_of, replace_notes
        from mpcompat.patches.mp_failure_records import step
        from mpcompat.workers import child_failures
        note_missing_attribute(exc)
        parent = child_failures.record(exc, what=step())
        if parent is not None and notes_of(exc):
            # The parent names the cause and the fix once; this child's traceback (one of
            # many when every worker of a Pool fails alike) only points there.
            replace_notes(exc, "mpcompat: the cause and the fix were sent to the parent "
                               "process (pid %d), which reports them once" % parent)
    except Exception:
        pass


class _ExceptHook(object):
    """A ``sys.excepthook`` that handles a start-up failure, then calls the previous hook."""

    def __init__(self, previous):
        self.previous = previous
        self.active = True

    def __call__(self, etype, value, tb):
        if self.active and isinstance(value, Exception) and \
                sys.modules["multiprocessing.process"]._parent_process is None:
            start_failed(value)  # before Process._bootstrap, which reports what it runs itself
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
