"""Patch ``multiprocessing.bootstrap_notes``: a child that fails while starting says why, and
its parent can learn it.

1. The missing main guard. A spawn or forkserver child imports the main module again; module-
   level code that starts a process then raises "An attempt has been made to start a new
   process before the current process has finished its bootstrapping phase" from
   ``multiprocessing.spawn._check_not_importing_main`` (called through the module's globals by
   ``get_preparation_data``). The hook adds a note naming the file and line of the main module
   that started the process, with the ``if __name__ == "__main__":`` fix.

2. Start-up failures of spawn and forkserver children. Both run ``spawn._main`` (spawn through
   ``spawn_main``, forkserver children through ``forkserver._serve_one``), which unpickles the
   preparation data, imports the main module as ``__mp_main__`` and unpickles the Process
   object before running it; what raises there kills the child (spawn: the interpreter prints
   it through ``sys.excepthook``; forkserver: ``_serve_one``'s caller calls ``sys.excepthook``).
   For that exception:
   - "AttributeError: Can't get attribute 'X' on <module '__mp_main__' ...>" gains a note that
     says where X is bound in the script (inside ``if __name__ == "__main__":``, which the
     child skips) and the fix (see ``mpcompat.diagnose.main_guard``);
   - the error, its notes and the step that failed are recorded with
     ``mpcompat.workers.child_failures.record`` for the parent.
   Where mpcompat was active before ``spawn._main`` started (a .pth file, ``mpcompat run``, a
   forkserver child), ``spawn._main`` is wrapped. Where the script's own ``import mpcompat``
   activates it while ``spawn._main`` already runs (the process is still "inheriting"), a
   chained ``sys.excepthook`` does the same for an error that ends the process before
   ``Process._bootstrap`` ran (``revert`` removes it if it is still the hook in place, and
   turns it off otherwise). The step that failed is the one ``multiprocessing.failure_records``
   saw ``spawn._main`` in.

Nothing here runs on the normal path: the wrappers are one extra call per process start.
"""
import functools
import sys

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import Skip

patcher = Patcher()
_DONE = "_mpcompat_start_failure"
_hooks = []  # the excepthooks installed in this process (at most one is active)


# --- 1. the bootstrapping-phase error ------------------------------------------------------------

def _wrap_check(original):
    @functools.wraps(original)
    def _check_not_importing_main():
        try:
            return original()
        except RuntimeError as exc:
            try:
                from mpcompat.diagnose.notes import bootstrap_failed
                bootstrap_failed(exc)
            except Exception:
                pass
            raise
    return _check_not_importing_main


# --- 2. start-up failures of spawn and forkserver children ---------------------------------------

def _wrap_main(original):
    @functools.wraps(original)
    def _main(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            start_failed(exc)
            raise
    return _main


def start_failed(exc):
    """``exc`` is killing this child while ``spawn._main`` starts it: note what is known about
    it, and record it for the parent (``mpcompat.workers.child_failures``). Never raises."""
    try:
        if exc.__dict__.get(_DONE):
            return
        exc.__dict__[_DONE] = True
    except Exception:
        return
    try:
        from mpcompat.diagnose.notes import note_missing_attribute
        note_missing_attribute(exc)
    except Exception:
        pass
    try:
        from mpcompat.patches.mp_failure_records import step
        from mpcompat.workers import child_failures
        parent = child_failures.record(exc, what=step())
        from mpcompat.diagnose.notes import notes_of, replace_notes
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
        previous = self.previous or sys.__excepthook__
        return previous(etype, value, tb)


def _install_hook():
    if any(h.active for h in _hooks):
        return
    hook = _ExceptHook(sys.excepthook)
    _hooks.append(hook)
    sys.excepthook = hook


def _remove_hooks():
    for hook in _hooks[::-1]:
        hook.active = False
        if sys.excepthook is hook:
            sys.excepthook = hook.previous
            _hooks.remove(hook)


# --- apply / revert ----------------------------------------------------------------------------

def apply(module):
    """Hook ``_check_not_importing_main`` and ``_main`` of ``module`` (``multiprocessing.spawn``);
    in a child that is starting up right now, also install the excepthook."""
    if not callable(module.__dict__.get("_check_not_importing_main")) or \
            not callable(module.__dict__.get("_main")):
        raise Skip("multiprocessing.spawn has no _check_not_importing_main() or _main()")
    for name, wrap in (("_check_not_importing_main", _wrap_check), ("_main", _wrap_main)):
        patcher.replace(module, name, wrap(patcher.original(module, name)))
    if getattr(module.process.current_process(), "_inheriting", False):
        _install_hook()


def revert(module):
    """Put back the original functions where ours are in place; remove the excepthook."""
    patcher.restore(module)
    _remove_hooks()
