"""Patch ``multiprocessing.exit_evidence``: what the kernel measured of each child's end, for the
reports of dead workers (``mpcompat.child_failures.memory_evidence``, said by ``.exits``).

``popen_fork.Popen`` (spawn's and forkserver's derive from it): ``__init__`` reads the OOM kill
counters just before the child starts; ``poll`` reaps with ``os.wait4`` instead of
``os.waitpid``, the same otherwise, which also gives the child's peak resident memory. The
forkserver reaps its own children and sends only their exit status: ``popen_forkserver.Popen
.poll`` notes the end, without the peak.

Runs in the Pool's and executors' threads that start and reap workers (the fork rule): all it
needs is imported as this process starts its first child (``__init__``, in the thread that
makes the Pool or the executor, before their threads start), not with the patch: spawn workers
apply it too, and start no child.
"""
import functools
import os

from mpcompat.patching import NotNeeded
from mpcompat.patching import Patcher

patcher = Patcher()
_WAITID = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")
_ENDED = os.WEXITED | os.WNOHANG | getattr(os, "WNOWAIT", 0) if _WAITID else 0
_evidence = []  # memory_evidence, loaded by the first start


def _init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if not _evidence:  # the first start: the user's thread
            import resource  # noqa: F401  (os.wait4 imports it at its first call)
            from mpcompat.child_failures import memory_evidence
            _evidence.append(memory_evidence)
        evidence = _evidence[0]
        try:
            before = evidence.snapshot()
        except Exception:
            before = None
        try:
            original(self, *args, **kwargs)
        except BaseException as exc:
            from mpcompat.workers.user_frames import drop_own_frames  # loaded by the start
            drop_own_frames(exc)
            raise
        evidence.started(self.pid, before)
    return __init__


def poll(self, flag=os.WNOHANG):
    """``popen_fork.Popen.poll``, reaping with ``os.wait4``: the exit code, or None."""
    if self.returncode is None:
        try:
            # Still running? Asked without reaping: a poll (each start polls every child)
            # builds no struct_rusage for a child that has not ended.
            if flag and _WAITID and os.waitid(os.P_PID, self.pid, _ENDED) is None:
                return None
            pid, status, rusage = os.wait4(self.pid, flag)
        except OSError:  # not created yet (CPython's poll says so too)
            return None
        if pid == self.pid:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _reaped(pid, code, rusage, "this process")
            self.returncode = code
    return self.returncode


def _forkserver_poll(original):
    @functools.wraps(original)
    def poll(self, *args, **kwargs):
        if self.returncode is not None:
            return self.returncode
        code = original(self, *args, **kwargs)
        if code is not None:
            _reaped(self.pid, code, None, "the forkserver")
        return code
    return poll


def _reaped(pid, code, rusage, reaper):
    if _evidence:  # else nothing was measured as it started
        try:
            _evidence[0].reaped(pid, code, rusage, reaper)
        except Exception:
            pass


def apply(module):
    """Wrap ``Popen.__init__`` and replace ``Popen.poll`` (``multiprocessing.popen_fork``), or
    wrap the forkserver's ``Popen.poll``."""
    if not hasattr(os, "wait4"):
        raise NotNeeded("this system has no os.wait4")
    cls = module.Popen
    if module.__name__ == "multiprocessing.popen_forkserver":
        patcher.replace(cls, "poll", _forkserver_poll(patcher.original(cls, "poll")))
        return
    patcher.replace(cls, "__init__", _init(patcher.original(cls, "__init__")))
    patcher.replace(cls, "poll", poll)


def revert(module):
    """Put back the originals where ours are still in place."""
    patcher.restore(module)
