"""Patch ``torch.spawn_errors``: a ``torch.multiprocessing.spawn`` child that died is named with
its cause.

``ProcessExitedException.__init__`` (wrapt) adds what ended the child, from what was measured
(``mpcompat.child_failures.exits``: an OOM kill, an exit code's meaning), and the start-up failure
the child recorded (``multiprocessing.bootstrap_notes``, ``mpcompat.child_failures.channel``),
if any.
"""
from mpcompat.patching.spec import Skip
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
    """Build the exception, then add what ended the child and its recorded error, if any."""
    wrapped(*args, **kwargs)
    try:
        from mpcompat.diagnose.notes import PREFIX, add_note
        from mpcompat.child_failures import channel
        from mpcompat.child_failures.exits import exit_cause
        pid = getattr(instance, "error_pid", None) or getattr(instance, "pid", None)  # 1.9: pid
        record = channel.take(pid)
        if record is not None:
            add_note(instance, channel.describe_records([record],
                                                       "torch.multiprocessing.spawn process"))
        lines = exit_cause(instance.exit_code, record, pid)
        if lines:
            add_note(instance, PREFIX + "\n".join(lines))
    except Exception:
        pass
