"""Patch ``torch.spawn_errors``: a ``torch.multiprocessing.spawn`` child that dies starting up is
named with its cause.

A spawn child that fails before ``fn`` runs (the main module cannot be imported again, or the
arguments cannot be unpickled: a class defined under ``if __name__ == "__main__":``) never
reaches torch's error reporting, and ``ProcessContext.join`` raises only
``ProcessExitedException("process 0 terminated with exit code 1")``. The child records its
start-up failure (``mpcompat.workers.child_failures``, through the ``multiprocessing.bootstrap_notes``
patch); this patch wraps ``ProcessExitedException.__init__`` with a ``wrapt.FunctionWrapper``
(same signature, class identity unchanged) so that the exception, built by ``join`` once the
child has exited, gains a note with that cause and the fix. Exceptions of children that
recorded nothing (killed by a signal, ``sys.exit(3)`` in ``fn``) are left as they are.
"""
from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

patcher = Patcher()


def apply(module):
    """Wrap ``module.ProcessExitedException.__init__``."""
    cls = getattr(module, "ProcessExitedException", None)
    if "__init__" not in getattr(cls, "__dict__", {}):
        raise Skip("%s has no ProcessExitedException.__init__" % module.__name__)
    patcher.wrap(cls, "__init__", _init_wrapper)


def revert(module):
    """Put back the original ``__init__`` where ours is still in place."""
    patcher.restore(module)


def _pid(msg, error_index, error_pid, *rest, **kwargs):
    return error_pid


def _init_wrapper(wrapped, instance, args, kwargs):
    """Build the exception, then add the recorded cause of the child's death, if any."""
    wrapped(*args, **kwargs)
    try:
        pid = _pid(*args, **kwargs)
        from mpcompat.workers import child_failures
        note = child_failures.note_for([pid], "torch.multiprocessing.spawn process")
        if note:
            from mpcompat.diagnose.notes import add_note
            add_note(instance, note)
    except Exception:
        pass
