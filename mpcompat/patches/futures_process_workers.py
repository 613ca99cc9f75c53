"""Patch ``concurrent_futures.process_workers``: a ProcessPoolExecutor broken by a dead worker
says which worker died, how, and why (patches.md).

The manager thread's ``terminate_broken(cause)`` adds the dead workers to ``cause`` (every
``BrokenProcessPool``'s ``__cause__``) and, before the pool is marked broken, to what ``submit``
raises; ``_process_worker`` (pickled by reference: a plain function) records an error escaping
it, and the error of an initializer that raised. Python 3.8: not needed.

Everything the manager thread runs is loaded as the executor starts it, in the user's thread
(``_start_executor_manager_thread``), never in that thread (the fork rule); a worker loads what
it needs only to record its error.
"""
import functools
from concurrent.futures import _base
from multiprocessing.connection import wait

from mpcompat.patcher import NotNeeded, Patcher

patcher = Patcher()
INITIALIZING = "running its initializer"
UNPICKLING = "unpickling a task its parent sent"
_NOTE = "_mpcompat_dead_workers"


def describe_dead(processes):
    """A note naming each process of ``processes`` (``{pid: Process}``) that ended, or None."""
    from mpcompat.child_failures import channel, exits  # loaded as the manager thread started
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
        record = channel.take(pid)
        # A worker whose initializer raised returns: its error says why, "exit code 0" does not.
        how = ": " + exits.describe_exit(code, pid) if code or not record else ""
        lines.append("ProcessPoolExecutor worker process %d ended%s." % (pid, how))
        if code == 0 and not record:
            lines.append("A worker ends so when its initializer raised (the traceback is on its "
                         "stderr) or a task called os._exit(0).")
        lines += exits.dead_lines(code, record, pid=pid)
    return channel.PREFIX + "\n".join(lines) if lines else None


class _BrokenWithNote(object):
    """``ProcessPoolExecutor._broken``, the message ``submit`` raises ``BrokenProcessPool`` with,
    read with the dead workers' note when there is one: the note is kept before the pool is
    marked broken, so no ``submit`` racing the manager thread misses it."""

    def __get__(self, executor, owner=None):
        if executor is None:
            return self
        broken = executor.__dict__.get("_broken", False)
        note = executor.__dict__.get(_NOTE)
        return broken + "\n" + note if note and isinstance(broken, str) else broken

    def __set__(self, executor, value):
        executor.__dict__["_broken"] = value


def _keep_note(executor, note):
    if executor is not None:
        executor.__dict__[_NOTE] = note


def _start_manager(original):
    @functools.wraps(original)
    def _start_executor_manager_thread(self, *args, **kwargs):
        # What the manager thread needs, before it starts: the user's thread (the fork rule).
        from mpcompat.child_failures import channel, exits  # noqa: F401
        from mpcompat.workers import user_frames  # noqa: F401  (its starts' and joins' errors)
        with channel.batch():  # the workers it starts (fork) share one reading
            return original(self, *args, **kwargs)
    return _start_executor_manager_thread


def _terminate_broken(original):
    @functools.wraps(original)
    def terminate_broken(self, cause=None, *args, **kwargs):
        try:
            note = describe_dead(self.processes)
            if note:
                _keep_note(self.executor_reference(), note)
                cause = (list(cause) + ["\n"] if cause else []) + [note + "\n"]
        except Exception:
            pass
        return original(self, cause, *args, **kwargs)
    return terminate_broken


class _Calls(object):
    """A worker's call queue that knows the step its worker is in."""

    def __init__(self, queue):
        self._queue = queue
        self.what = INITIALIZING

    def __getattr__(self, name):
        return getattr(self._queue, name)

    def get(self, *args, **kwargs):
        """The next call item, as the real queue gives it."""
        self.what = UNPICKLING
        item = self._queue.get(*args, **kwargs)
        self.what = "running a task"
        return item


def _record_initializer_error(calls, log_record):
    """A filter of the worker's ``concurrent.futures`` logger: CPython logs the error of an
    initializer that raised and returns (the worker exits with code 0); record that error."""
    if calls.what == INITIALIZING and log_record.exc_info:
        from mpcompat.child_failures import channel  # the worker's own thread
        channel.record(log_record.exc_info[1], what=INITIALIZING)
    return True


def _recording_worker(original):
    @functools.wraps(original)
    def _process_worker(call_queue, *args, **kwargs):
        calls = _Calls(call_queue)
        # A filter, not a wrapper around the initializer: its logged traceback stays CPython's.
        _base.LOGGER.addFilter(functools.partial(_record_initializer_error, calls))
        try:
            return original(calls, *args, **kwargs)
        except BaseException as exc:
            # In the worker's own thread: importing is safe.
            from mpcompat.child_failures import channel
            from mpcompat.workers.user_frames import drop_own_frames
            if calls.what == UNPICKLING:
                from mpcompat.diagnose.notes import note_missing_attribute
                note_missing_attribute(exc)
            channel.record(exc, what=calls.what)
            drop_own_frames(exc)  # the worker's traceback: no frame of this wrapper
            raise
    return _process_worker


def apply(module):
    """Wrap ``terminate_broken`` and ``_start_executor_manager_thread``, make
    ``ProcessPoolExecutor._broken`` carry the note, and replace ``_process_worker``
    (concurrent.futures.process)."""
    manager = getattr(module, "_ExecutorManagerThread", None)
    if manager is None or "terminate_broken" not in manager.__dict__:
        raise NotNeeded("this Python's ProcessPoolExecutor has no terminate_broken to hook "
                        "(Python 3.8): its BrokenProcessPool stays as it is")
    for owner, name, make in ((manager, "terminate_broken", _terminate_broken),
                              (module.ProcessPoolExecutor, "_start_executor_manager_thread",
                               _start_manager),
                              (module, "_process_worker", _recording_worker)):
        patcher.replace(owner, name, make(patcher.original(owner, name)))
    patcher.replace(module.ProcessPoolExecutor, "_broken", _BrokenWithNote())


def revert(module):
    """Put back the originals where ours are still in place."""
    patcher.restore(module)
