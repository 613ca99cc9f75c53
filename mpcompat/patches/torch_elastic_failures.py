"""Patch ``torch.elastic_failures``: in the torchrun agent, a rank that died without an error
file is named in the failure summary with its measured cause (patches.md).

torch's agent makes a ``ProcessFailure`` (public) for each failed rank; without an error file
its ``message`` is only "Signal 9 (SIGKILL) received by PID ..." or "To enable traceback see
...". This patch adds mpcompat's lines to that message, where the summary shows it: what ended
the rank, from what was measured (``mpcompat.child_failures.exits``: the OOM killer or another
sender of SIGKILL, the exit code's meaning) and, for a function entrypoint (``elastic_launch``), the
cause mpcompat noted on the error torch caught from the rank (a start-up failure, its fix).
A rank started as a script (not ``multiprocessing``'s) arms the crash file the agent names in
the environment it inherits (``mpcompat.child_failures.crash_stacks``): a native crash is named with
the rank's Python stack; the agent's OOM counters, read as the patch applies, stand for those
read as each rank started. A rank whose error says that a peer is gone failed because another
one did: it is dated a second after the agent learnt it, so that the summary's root cause (the
earliest failure, dates in whole seconds, the agent's own date for a rank without a file) is
the rank that died first.
"""
import os
import sys
import time

from mpcompat.patching.patcher import Patcher
from mpcompat.patching.spec import Skip

patcher = Patcher()
_agent = []  # in the agent: the OOM counters read as the patch applied, before any rank started
NO_FILE = "<N/A>"  # torch's ProcessFailure.error_file when the rank wrote none
# What gloo and NCCL raise in a rank whose peer died.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer",
              "remote process exited")


def _caught_notes(pid):
    """mpcompat's notes on the error torch's agent is handling for the rank ``pid`` (a
    ``ProcessRaisedException`` or ``ProcessExitedException`` of torch.multiprocessing: its
    ``error_pid``, ``pid`` in torch 1.9)."""
    exc = sys.exc_info()[1]
    if exc is None or getattr(exc, "error_pid", getattr(exc, "pid", None)) != pid:
        return []
    from mpcompat.diagnose.notes import notes_of
    return notes_of(exc)


def cause_lines(failure):
    """mpcompat's lines on the rank of ``failure`` (a ProcessFailure without an error file)."""
    from mpcompat.child_failures.exits import dead_lines, describe_exit
    notes = _caught_notes(failure.pid)
    if notes:
        return notes
    if _agent:
        from mpcompat.child_failures import memory_evidence
        memory_evidence.assume_started(failure.pid, _agent[0])
    return ["mpcompat: local rank %s (pid %s) ended: %s." % (
        failure.local_rank, failure.pid, describe_exit(failure.exitcode, failure.pid))] + \
        dead_lines(failure.exitcode, None, pid=failure.pid)


def after_a_peer(message):
    """Whether a rank's error ``message`` (its file's: a dict, or a string) says a peer is
    gone."""
    text = message.get("message", "") if isinstance(message, dict) else message
    return isinstance(text, str) and any(part in text for part in _PEER_GONE)


def _post_init(original):
    def __post_init__(self):
        original(self)
        try:
            if self.error_file == NO_FILE and self.exitcode and isinstance(self.message, str):
                text = "\n".join([self.message] + cause_lines(self))
                self.message = text.replace("\n", "\n  ")  # indented as torch's tracebacks
            elif after_a_peer(self.message):
                self.timestamp = max(self.timestamp, int(time.time()) + 1)
        except Exception:  # the summary goes on with torch's own words
            pass
        from mpcompat.child_failures import crash_stacks
        crash_stacks.joined(self.pid, self.exitcode)  # the empty file of a rank killed
    __post_init__.__wrapped__ = original
    return __post_init__


def apply(module):
    """Wrap ``ProcessFailure.__post_init__`` of ``module``
    (``torch.distributed.elastic.multiprocessing.errors``)."""
    cls = module.__dict__.get("ProcessFailure")
    if cls is None or not callable(cls.__dict__.get("__post_init__")):
        raise Skip("torch's ProcessFailure has no __post_init__()")
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:  # not in a rank: maybe the agent
        from mpcompat.child_failures import crash_stacks, memory_evidence
        crash_stacks.share_with_children()
        _agent[:] = [memory_evidence.snapshot()]
    patcher.replace(cls, "__post_init__", _post_init(patcher.original(cls, "__post_init__")),
                    target=module.__name__)


def revert(module):
    """Put the original back where ours is in place."""
    patcher.restore(module)
