"""Patch ``torch.spawn_errors``: a ``torch.multiprocessing.spawn`` child that dies starting up is
named with its cause.

``ProcessExitedException.__init__`` (wrapt) adds the start-up failure the child recorded
(``multiprocessing.bootstrap_notes``, ``mpcompat.workers.child_failures``), if any.
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


def _init_wrapper(wrapped, instance, args, kwargs):
    """Build the exception, then add the recorded cause of the child's death, if any."""
    wrapped(*args, **kwargs)
    try:
        from mpcompat.workers import child_failures
        pid = args[2] if len(args) > 2 else kwargs.get("error_pid")  # (msg, error_index, error_pid)
        note = child_failures.note_for([pid], "torch.multiprocessing.spawn process")
        if note:
            from mpcompat.diagnose.notes import add_note
            add_note(instance, note)
    except Exception:
        pass
