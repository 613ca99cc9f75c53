"""Patch ``concurrent_futures.process_workers``: a ProcessPoolExecutor broken by a dead worker
says which worker died, how, and why (patches.md).

The manager thread's ``terminate_broken(cause)`` adds the dead workers to ``cause`` (every
``BrokenProcessPool``'s ``__cause__``); ``_process_worker`` (pickled by reference: a plain
function) records an error escaping it. Python 3.8: not needed.
"""
import functools

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import NotNeeded

patcher = Patcher()
UNPICKLING = "unpickling a task its parent sent"


def describe_dead(processes):
    """A note naming each process of ``processes`` (``{pid: Process}``) that ended, or None."""
    from multiprocessing.connection import wait
    from mpcompat.diagnose.notes import PREFIX
    from mpcompat.workers import child_failures
    from mpcompat.workers.exits import dead_lines, describe_exit
    processes = dict(processes)
    ready = set(wait([p.sentinel for p in processes.values()], timeout=0))
    lines = []
    for pid, process in sorted(processes.items()):
        if process.sentinel not in ready:
            continue
        process.join(1.0)  # its sentinel is ready a moment before the kernel has its status
        code = process.exitcode
        if code is None:
            continue
        lines.append("ProcessPoolExecutor worker process %d ended: %s."
                     % (pid, describe_exit(code)))
        lines += dead_lines(code, child_failures.take(pid) if code else None)
    return PREFIX + "\n".join(lines) if lines else None


def _terminate_broken(original):
    @functools.wraps(original)
    def terminate_broken(self, cause=None, *args, **kwargs):
        try:
            note = describe_dead(self.processes)
        except Exception:
            note = None
        if note:
            cause = (list(cause) + ["\n"] if cause else []) + [note + "\n"]
        result = original(self, cause, *args, **kwargs)
        executor = self.executor_reference()
        if note and executor is not None and isinstance(executor._broken, str):
            executor._broken += "\n" + note
        return result
    return terminate_broken


class _Calls(object):
    """A worker's call queue that knows when a task is unpickled."""

    def __init__(self, queue):
        self._queue = queue
        self.what = "starting"

    def __getattr__(self, name):
        return getattr(self._queue, name)

    def get(self, *args, **kwargs):
        """The next call item, as the real queue gives it."""
        self.what = UNPICKLING
        item = self._queue.get(*args, **kwargs)
        self.what = "running a task"
        return item


def _recording_worker(original):
    @functools.wraps(original)
    def _process_worker(call_queue, *args, **kwargs):
        calls = _Calls(call_queue)
        try:
            return original(calls, *args, **kwargs)
        except BaseException as exc:
            if calls.what == UNPICKLING:
                from mpcompat.diagnose.notes import note_missing_attribute
                note_missing_attribute(exc)
            from mpcompat.workers import child_failures
            child_failures.record(exc, what=calls.what)
            raise
    return _process_worker


def apply(module):
    """Wrap ``terminate_broken`` and replace ``_process_worker`` (concurrent.futures.process)."""
    manager = getattr(module, "_ExecutorManagerThread", None)
    if manager is None or "terminate_broken" not in manager.__dict__:
        raise NotNeeded("this Python's ProcessPoolExecutor has no terminate_broken to hook "
                        "(Python 3.8): its BrokenProcessPool stays as it is")
    for owner, name, make in ((manager, "terminate_broken", _terminate_broken),
                              (module, "_process_worker", _recording_worker)):
        patcher.replace(owner, name, make(patcher.original(owner, name)))


def revert(module):
    """Put back the original where ours is still in place."""
    patcher.restore(module)
