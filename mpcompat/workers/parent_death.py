"""A child ends with its parent (issue 35; patches.md, "No orphans"): every child mpcompat
sees start ends moments after its parent's death, with one line on its stderr that says so.

- A ``multiprocessing`` child (Pool, executor and DataLoader workers, ``Process``,
  ``torch.multiprocessing.spawn``; fork, spawn and forkserver alike) watches its *parent
  sentinel*, the read end of a pipe whose write end only its parent holds (a forkserver child's
  too: that pipe comes from the process that asked for it, not from the forkserver):
  ``mp_children.watch_parent`` asks the kernel for ``SIGIO`` to the main thread as that
  end closes. Only the handling is here, loaded when the signal comes.
- A torchrun rank (a ``subprocess`` child of its agent: no such pipe) arms
  ``prctl(PR_SET_PDEATHSIG, SIGIO)`` (:func:`watch_agent`): the agent starts its ranks in the
  thread that runs it. A signal sent as that thread exits while the agent lives (the kernel
  sends one each time the rank passes to another thread of the agent) is told apart by
  ``getppid()``, unchanged; an agent that died before the rank armed, by the same compare
  against the pid the agent put in the environment.

:func:`on_signal` checks the evidence (the pipe reads EOF; the agent is no longer the rank's
parent) and that the parent really ended (``/proc/<pid>/stat``: gone, a zombie, or its exit
status set), writes one line to stderr with the parent's pid and, where ``/proc`` still shows
it, its signal or exit code, and ends the process with ``os._exit(1)`` (its exit handlers
would wait for a parent that is gone). A pipe closed by a parent that lives on kills nothing.
"""
import os
import sys

_PR_SET_PDEATHSIG = 1
_ALIVE_CHECKS = 50  # 10 ms apart: a parent whose pipe closed as it exits is a zombie by then


def watch_agent(records):
    """In a torchrun rank as it starts (its agent put its pid in ``records.AGENT_ENV``, taken
    out here so that the rank's own children do not read it; ``records``: the module
    ``mp_children``, which calls this and handles the signal): end this process, with
    one line on its stderr, when the agent dies (``PR_SET_PDEATHSIG``). Linux; never raises."""
    agent = os.environ.pop(records.AGENT_ENV, "")
    if (not agent.isdigit() or not sys.platform.startswith("linux") or
            os.environ.get(records.OUTLIVE_ENV, "") not in ("", "0")):
        return
    try:
        import ctypes
        import _signal
        agent = int(agent)
        if os.getppid() != agent and _ended(agent, checks=1) is False:
            return  # not the agent's child (a process the rank started that kept the variable)
        name = "torchrun rank %s (local rank %s)" % (os.environ.get("RANK", "?"),
                                                     os.environ.get("LOCAL_RANK", "?"))
        records.watched.armed = (os.getpid(), None, agent, name)
        _signal.signal(_signal.SIGIO, records._parent_signal)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, _signal.SIGIO, 0, 0, 0)
        if os.getppid() != agent:  # it died before prctl
            on_signal(records.watched.armed)
    except Exception:
        pass


def on_signal(armed):
    """SIGIO in a watching process (``armed``: ``mp_children.watched.armed``): if its
    parent died, one line on stderr and exit; else (the pipe closed or the agent's thread
    ended, the parent lives on) nothing."""
    pid, sentinel, parent, name = armed
    if sentinel is not None:
        try:
            if os.read(sentinel, 1) != b"":
                return
        except OSError:  # BlockingIOError: not at EOF, not its parent's end
            return
    elif os.getppid() == parent:  # a thread of the agent ended, not the agent
        return
    status = _ended(parent)
    if status is False:  # the pipe closed, but the parent lives: not ours to end
        return
    try:
        os.write(2, ("mpcompat: %s (pid %d) exits: its parent (pid %d) died%s.\n" % (
            name, pid, parent, _how(status))).encode("utf-8", "replace"))
    finally:
        os._exit(1)


def _ended(parent, checks=_ALIVE_CHECKS):
    """Whether ``parent`` has ended, from ``/proc/<pid>/stat``: its exit status as ``waitpid``
    words it (an int; 0 for an exit code 0), None once it is gone (reaped, or no ``/proc``),
    False while it lives on (looked at ``checks`` times 10 ms apart: a pipe closes as a process
    exits, a moment before it is a zombie)."""
    import time
    for check in range(checks):
        try:
            with open("/proc/%d/stat" % parent, "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        code = int(fields[49]) if len(fields) > 49 else 0  # field 52, exit_code (Linux 3.5)
        if fields[0] in (b"Z", b"X") or code:
            return code
        if check + 1 < checks:
            time.sleep(0.01)
    return False


def _how(status):
    """``: killed by signal 9 (SIGKILL)``, ``: exit code 3``, or what is not known."""
    if status is None:
        return " (its exit status is not known here: it was already reaped)"
    if status & 0x7F:
        import signal
        number = status & 0x7F
        try:
            return ": killed by signal %d (%s)" % (number, signal.Signals(number).name)
        except ValueError:
            return ": killed by signal %d" % number
    return ": exit code %d" % (status >> 8)
