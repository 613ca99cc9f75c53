"""Patch ``multiprocessing.bootstrap_notes``: a child that fails while starting says why, and
its parent can learn it (patches.md).

``spawn._check_not_importing_main`` (no main guard) gains a note with the line and the fix;
what kills a spawn or forkserver child inside ``spawn._main`` gains the main-guard note and is
recorded for the parent. Where mpcompat is activated while ``spawn._main`` already runs (the
script's own ``import mpcompat``), a chained ``sys.excepthook`` does that instead. The work is
:mod:`mpcompat.child_failures.spawn_child`'s, loaded when a child fails.
"""
import functools

from mpcompat.patching import ExceptHooks, Patcher
from mpcompat.patching import Skip

patcher = Patcher()
hooks = ExceptHooks()


def _hooked(original, errors, on_error):
    """``original``, calling ``spawn_child.<on_error>(exc)`` for an error of type ``errors`` it
    raises; when that returns a string, it is printed instead of the traceback (nothing for
    ""), and the process exits with code 1; None: the error goes on."""
    @functools.wraps(original)
    def hooked(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except errors as exc:
            line = None
            try:
                from mpcompat.child_failures import spawn_child  # a failing child's main thread
                line = getattr(spawn_child, on_error)(exc)
            except Exception:
                pass
            if line is None:
                raise
        spawn_child.print_line(line)
        raise SystemExit(1)  # spawn_main exits with it; a forkserver child exits 1 in any case
    return hooked


def apply(module):
    """Hook ``_check_not_importing_main`` and ``_main`` of ``module`` (``multiprocessing.spawn``);
    in a child that is starting up right now, also install the excepthook."""
    if not callable(module.__dict__.get("_check_not_importing_main")) or \
            not callable(module.__dict__.get("_main")):
        raise Skip("multiprocessing.spawn has no _check_not_importing_main() or _main()")
    for name, errors, on_error in (("_check_not_importing_main", RuntimeError,
                                    "main_guard_failed"),
                                   ("_main", Exception, "start_failed")):
        patcher.replace(module, name, _hooked(patcher.original(module, name), errors, on_error))
    if getattr(module.process.current_process(), "_inheriting", False):
        from mpcompat.child_failures import spawn_child
        hooks.install(spawn_child.ExceptHook)


def revert(module):
    """Put back the originals where ours are in place; turn the excepthook off (removed where
    it is still the one in place)."""
    patcher.restore(module)
    hooks.remove()
