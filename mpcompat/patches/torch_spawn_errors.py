"""Patch ``torch.spawn_errors``: a ``torch.multiprocessing.spawn`` child that died is named with
its cause.

``ProcessExitedException.__init__`` (a plain wrapper: wrapt is not loaded for it) adds what
ended the child, from what was measured (``mpcompat.child_failures.exits``: an OOM kill, an exit
code's meaning), and the start-up failure the child recorded (``multiprocessing.bootstrap_notes``,
``mpcompat.child_failures.channel``), if any; all loaded when one is raised.
"""
import functools

from mpcompat.patcher import Patcher, Skip

patcher = Patcher()


def apply(module):
    """Wrap ``module.ProcessExitedException.__init__``."""
    cls = getattr(module, "ProcessExitedException", None)
    if "__init__" not in getattr(cls, "__dict__", {}):
        raise Skip("%s has no ProcessExitedException.__init__" % module.__name__)
    patcher.replace(cls, "__init__", _init(patcher.original(cls, "__init__")))


def revert(module):
    """Put back the original ``__init__`` where ours is still in place."""
    patcher.restore(module)


def _init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _add_cause(self)
    return __init__


def _add_cause(instance):
    """Add to ``instance`` what ended the child and its recorded error, if any. Never
    raises."""
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
