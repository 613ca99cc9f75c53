"""Patch ``torch.elastic_failures``: in the torchrun agent, a rank that died without an error
file is named in the failure summary with its measured cause (patches.md).

torch's agent makes a ``ProcessFailure`` (public) for each failed rank; without an error file
its ``message`` is only "Signal 9 (SIGKILL) received by PID ..." or "To enable traceback see
...". This patch adds mpcompat's lines to that message, where the summary shows it: what ended
the rank, from what was measured (``mpcompat.child_failures.exits``: the OOM killer or another
sender of SIGKILL, the exit code's meaning) and, for a function entrypoint (``elastic_launch``), the
cause mpcompat noted on the error torch caught from the rank (a start-up failure, its fix).
A rank started as a script (not ``multiprocessing``'s) arms the crash file the agent names in
the environment it inherits (``mpcompat.child_failures.channel``): a native crash is named with
the rank's Python stack; and it dies with its agent, whose pid is there too
(``mpcompat.workers.parent_death``). The agent's OOM counters, read as the patch applies, stand
for those read as each rank started. A rank whose error says that a peer is gone
(:func:`after_a_peer`) failed because another one did: it is dated a second after the agent
learnt it, so that the summary's root cause (the earliest failure, dates in whole seconds, the
agent's own date for a rank without a file) is the rank that died first; unless it is that
root cause, ``ChildFailedError.format_msg`` shows it in one line (its error file keeps the
whole traceback). Where mpcompat has the cause of a rank without an error file (a start-up failure's
notes), the cause replaces torch's placeholder ("To enable traceback see: ...", torch 1.9:
"Process failed with exitcode 1").
"""
import copy
import os
import re
import sys
import time

from mpcompat.patches.mp_children import AGENT_ENV
from mpcompat.patcher import Patcher, Skip

patcher = Patcher()
_agent = []  # in the agent: the OOM counters read as the patch applied, before any rank started
NO_FILE = "<N/A>"  # torch's ProcessFailure.error_file when the rank wrote none
# What gloo, NCCL and the c10d store say in a rank whose peer died ...
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer",
              "remote process exited")
# ... as the error of a collective or of the store: torch 1.9 raises RuntimeError, torch 2 that
# or one of its subclasses in torch.distributed (a ConnectionResetError is the user's socket).
_DIST_ERRORS = ("RuntimeError", "DistError", "DistBackendError", "DistNetworkError",
                "DistStoreError")
_SOURCE = re.compile(r"\[[^\]\s]*:\d+\] ")  # gloo's "[../gloo/transport/tcp/pair.cc:553] "


def _caught_notes(pid):
    """mpcompat's notes on the error torch's agent is handling for the rank ``pid`` (a
    ``ProcessRaisedException`` or ``ProcessExitedException`` of torch.multiprocessing: its
    ``error_pid``, ``pid`` in torch 1.9)."""
    exc = sys.exc_info()[1]
    if exc is None or getattr(exc, "error_pid", getattr(exc, "pid", None)) != pid:
        return []
    from mpcompat.diagnose.notes import notes_of
    return notes_of(exc)


def failure_lines(failure):
    """The lines the summary shows for ``failure`` (a ProcessFailure without an error file):
    mpcompat's notes on the error torch caught from the rank, in place of torch's placeholder,
    for a rank that exited (a signal's name is kept); else torch's message and what mpcompat
    measured."""
    notes = _caught_notes(failure.pid)
    if notes:
        return notes if failure.exitcode > 0 else [failure.message] + notes
    return [failure.message] + cause_lines(failure)


def cause_lines(failure):
    """What mpcompat measured of the end of the rank of ``failure`` (no error file); none for
    a signal of which it knows no more than torch's "Signal 15 (SIGTERM) received by PID ..."
    says (the agent stops the ranks left with SIGTERM when one fails)."""
    from mpcompat.child_failures.exits import dead_lines, describe_exit
    if _agent:
        from mpcompat.child_failures import channel
        channel.assume_started(failure.pid, _agent[0])
    ended = describe_exit(failure.exitcode, failure.pid)
    more = dead_lines(failure.exitcode, None, pid=failure.pid)
    if failure.exitcode < 0 and not more and ended.startswith("killed by signal "):
        return []
    return ["mpcompat: local rank %s (pid %s) ended: %s." % (
        failure.local_rank, failure.pid, ended)] + more


def _text(message):
    """The "Type: message" text of a rank's error ``message`` (its file's: a dict or a
    string; torch's own made-up one), '' if none."""
    text = message.get("message", "") if isinstance(message, dict) else message
    return text if isinstance(text, str) else ""


def after_a_peer(message):
    """Whether a rank's error ``message`` says a peer is gone: a collective's or the store's
    error (``_DIST_ERRORS``) whose text names the peer's connection closed or reset."""
    text = _text(message)
    return text.split(":", 1)[0].strip() in _DIST_ERRORS and any(
        part in text for part in _PEER_GONE)


def one_line(message):
    """The summary's line for a rank that failed after a peer: its error's type and the
    sentence that says the peer is gone (gloo's source location left out)."""
    lines = _text(message).splitlines()
    kind = lines[0].split(":", 1)[0].strip()
    line = next(line for line in lines if any(part in line for part in _PEER_GONE))
    line = _SOURCE.sub("", line).strip()
    start = min(line.find(part) for part in _PEER_GONE if part in line)
    end = line.find(". ", start)
    line = line[:end if end > 0 else len(line)]
    if not line.startswith(kind + ":"):
        line = "%s: %s" % (kind, line)
    return line[:300] + " (mpcompat: a peer ended first; see the root cause)"


def _format_msg(original):
    def format_msg(self, *args, **kwargs):
        """torch's summary, where each rank that failed after a peer (but the root cause) is
        one line."""
        failures = self.failures
        try:
            root = self.get_first_failure()[0]
            shown = {}
            for rank, failure in failures.items():
                if rank != root and after_a_peer(failure.message):
                    failure = copy.copy(failure)
                    failure.message = one_line(failure.message)
                shown[rank] = failure
            self.failures = shown
        except Exception:  # torch's summary as torch makes it
            self.failures = failures
        try:
            return original(self, *args, **kwargs)
        finally:
            self.failures = failures
    format_msg.__wrapped__ = original
    return format_msg


def _post_init(original):
    def __post_init__(self):
        original(self)
        try:
            if self.error_file == NO_FILE and self.exitcode and isinstance(self.message, str):
                text = "\n".join(failure_lines(self))
                self.message = text.replace("\n", "\n  ")  # indented as torch's tracebacks
            elif after_a_peer(self.message):
                self.timestamp = max(self.timestamp, int(time.time()) + 1)
        except Exception:  # the summary goes on with torch's own words
            pass
        from mpcompat.child_failures import channel
        channel.joined(self.pid, self.exitcode)  # the empty file of a rank killed
    __post_init__.__wrapped__ = original
    return __post_init__


def apply(module):
    """Wrap ``ProcessFailure.__post_init__`` and ``ChildFailedError.format_msg`` of ``module``
    (``torch.distributed.elastic.multiprocessing.errors``)."""
    cls = module.__dict__.get("ProcessFailure")
    if cls is None or not callable(cls.__dict__.get("__post_init__")):
        raise Skip("torch's ProcessFailure has no __post_init__()")
    error = module.__dict__.get("ChildFailedError")
    if error is None or not callable(error.__dict__.get("format_msg")):
        raise Skip("torch's ChildFailedError has no format_msg()")
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:  # not in a rank: maybe the agent
        from mpcompat.child_failures import channel
        channel.share_with_children()
        # Its ranks end with it (mp_children.arm_inherited: PR_SET_PDEATHSIG).
        os.environ[AGENT_ENV] = str(os.getpid())
        _agent[:] = [channel.snapshot()]
    patcher.replace(cls, "__post_init__", _post_init(patcher.original(cls, "__post_init__")),
                    target=module.__name__)
    patcher.replace(error, "format_msg", _format_msg(patcher.original(error, "format_msg")),
                    target=module.__name__)


def revert(module):
    """Put the original back where ours is in place."""
    patcher.restore(module)
