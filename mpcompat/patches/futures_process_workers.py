"""Patch ``concurrent_futures.process_workers``: a ProcessPoolExecutor broken by a dead worker
says which worker died, how, and why.

When a worker process dies, the executor's manager thread breaks the executor: every pending
future fails with ``BrokenProcessPool("A process in the process pool was terminated abruptly
while the future was running or pending.")``, which names no process and no cause. The manager
thread's ``terminate_broken(cause)`` is wrapped. Its ``cause`` argument is CPython's own way to
say more (it becomes the ``__cause__`` of the ``BrokenProcessPool``, shown above it in the
traceback): the workers that are dead at that moment are added to it, each with its pid, its
exit code or signal ("killed by signal 9 (SIGKILL)"), the likely cause, and the worker's own
recorded error when it left one (``mpcompat.workers.child_failures``). The executor's later
``submit`` calls say the same.

In the workers, ``_process_worker`` (a Process target, sent by reference) is replaced by a plain
function of the same name that records an error escaping it, with the step it was in
(unpickling a task its parent sent: with the main-guard note), for the parent to name.

Python 3.8's executor breaks inside one long function, with no method to hook: there the patch
has nothing to do (status: not needed).
"""
import functools

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import NotNeeded

patcher = Patcher()


def describe_dead(processes):
    """A note naming each dead process of ``processes`` (``{pid: Process}``), or None."""
    from mpcompat.diagnose.notes import PREFIX
    from mpcompat.workers import child_failures
    from mpcompat.workers.exits import describe_exit, exit_hint
    lines = []
    for pid, process in sorted(processes.items()):
        code = process.exitcode
        if code is None:
            continue
        lines.append("ProcessPoolExecutor worker process %d ended: %s." % (pid, describe_exit(code)))
        if exit_hint(code):
            lines.append(exit_hint(code) + ".")
        record = child_failures.take(pid) if code else None
        if record:
            text = "Its own error: %s" % record.get("error", "")
            if record.get("what"):
                text += " (while %s)" % record["what"]
            lines.append(text)
            lines.extend(record.get("notes") or ())
    return PREFIX + "\n".join(lines) if lines else None


def _terminate_broken(original):
    @functools.wraps(original)
    def terminate_broken(self, cause=None, *args, **kwargs):
        note = None
        try:
            note = describe_dead(_ended(self.processes))
        except Exception:
            pass
        if note:
            cause = (list(cause) + ["\n"] if cause else []) + [note + "\n"]
        result = original(self, cause, *args, **kwargs)
        executor = self.executor_reference()
        if note and executor is not None and isinstance(executor._broken, str):
            executor._broken += "\n" + note
        return result
    return terminate_broken


def _ended(processes):
    """``{pid: Process}`` of the processes that ended (their exit status collected: a sentinel
    is ready a moment before the kernel has the status)."""
    from multiprocessing.connection import wait
    processes = dict(processes)
    ready = set(wait([p.sentinel for p in processes.values()], timeout=0))
    ended = {}
    for pid, process in processes.items():
        if process.sentinel in ready:
            process.join(1.0)
            ended[pid] = process
    return ended


class _Calls(object):
    """A worker's call queue as ``_process_worker`` sees it: it knows when a task is being
    unpickled."""

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


UNPICKLING = "unpickling a task its parent sent"


def _recording_worker(original):
    @functools.wraps(original)
    def _process_worker(call_queue, *args, **kwargs):
        calls = _Calls(call_queue)
        try:
            return original(calls, *args, **kwargs)
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt) and not (
                    isinstance(exc, SystemExit) and exc.code in (None, 0)):
                if calls.what == UNPICKLING:
                    from mpcompat.diagnose.notes import note_missing_attribute
                    note_missing_attribute(exc)
                from mpcompat.workers import child_failures
                child_failures.record(exc, what=calls.what)
            raise
    return _process_worker


def apply(module):
    """Wrap ``_ExecutorManagerThread.terminate_broken`` and replace ``_process_worker`` of
    ``concurrent.futures.process``."""
    manager = getattr(module, "_ExecutorManagerThread", None)
    if manager is None or "terminate_broken" not in manager.__dict__:
        raise NotNeeded("this Python's ProcessPoolExecutor has no terminate_broken to hook "
                        "(Python 3.8): its BrokenProcessPool stays as it is")
    patcher.replace(manager, "terminate_broken",
                    _terminate_broken(patcher.original(manager, "terminate_broken")))
    patcher.replace(module, "_process_worker",
                    _recording_worker(patcher.original(module, "_process_worker")))


def revert(module):
    """Put back the original where ours is still in place."""
    patcher.restore(module)
