"""Patch ``multiprocessing.pool_workers``: a Pool never loses a task and never hangs because a
worker died, never respawns dying workers forever, and names what it cannot send back
(patches.md).

Each worker has a private channel, two pipes (tasks in, results out), and the parent dispatches
the tasks to workers that said they are ready
(:class:`mpcompat.workers.pool_dispatcher.Dispatcher`). This module holds what a worker runs,
its side of the channel, and the hooks on ``Pool``. The parent's side (the dispatcher, the
wording of a dead worker) loads as the process's first Pool is made, in the user's thread: a
worker, and a process that makes no Pool, never load it. A ThreadPool is not touched. Unix only.
"""
import functools
import sys
import threading
import types
import weakref
from multiprocessing.reduction import ForkingPickler

from mpcompat.activation import imported
from mpcompat.patcher import Patcher, Skip

TASK_STAGE, WAITING = "running a task", "waiting for a task"
# What a worker says besides results: as it starts; when ready; as it dies waiting for a task
# (of an exception no task raised: Ctrl-C), having started none of those sent to it.
STARTED, READY, IDLE = b"s", b"r", b"i"
_UNEXPLAINED = "_mpcompat_unexplained"  # on the error of a task that cannot be pickled
# What the patch replaces on Pool, and how Pool binds it (None: a plain method).
_HOOKED = {"_setup_queues": None, "_repopulate_pool": None,
           "_repopulate_pool_static": staticmethod,
           "_maintain_pool": staticmethod, "_terminate_pool": classmethod,
           "_check_running": None, "_map_async": None}
# The parent's side: loaded by a process Pool's _setup_queues, which its __init__ calls in the
# user's thread before its helper threads start (they never import: the fork rule). A
# ThreadPool has a _setup_queues of its own, and never loads it.
_PARENT_SIDE = "mpcompat.workers.pool_dispatcher"


class _PoolTask(threading.local):
    """``func``: in a Pool worker, the function of the task it runs; None elsewhere (read by
    the pickling notes when the task's result cannot be sent)."""
    func = None


current = _PoolTask()
patcher = Patcher()
_dispatchers = weakref.WeakSet()  # of every Pool of this process (each Dispatcher adds itself)


# --- the worker's side ----------------------------------------------------------------------

class _Tasks(object):
    """A worker's ends of its channel, as its task and result queue: it says it is ready at the
    first ``get``; a task it cannot unpickle fails as that task's result. ``what``: the step the
    worker is at, for its failure record."""

    def __init__(self, tasks, results):
        self.recv_bytes, self.results = tasks.recv_bytes, results
        self.what, self.asked = "starting", False

    def initializing(self, initializer):
        """``initializer``, naming its step while it runs."""
        def run(*args):
            self.what = "running the Pool's initializer %s()" % (
                getattr(initializer, "__qualname__", None) or repr(initializer))
            initializer(*args)
        return run

    def get(self):
        """The next task (None: stop)."""
        self.what = WAITING
        if not self.asked:
            self.asked = True
            self.results.send_bytes(READY)
        while True:
            data = self.recv_bytes()
            try:
                task = ForkingPickler.loads(data)
            except Exception as exc:
                self._unreadable(exc)
                continue
            if task is not None:
                self.what, current.func = TASK_STAGE, task[2]
            return task

    def leaving(self):
        """This worker ends of an exception no task raised (Ctrl-C): waiting for a task, it
        started none of those sent to it; the parent gives them to other workers."""
        if self.what == WAITING:
            try:
                self.results.send_bytes(IDLE)
            except Exception:
                pass

    def put(self, obj):
        """Send a result (the parent knows which task it answers). A parent that closed the
        channel has settled the task already: the next ``get`` ends the worker, quietly."""
        try:
            self.results.send(obj)
        except BrokenPipeError:
            pass

    def _unreadable(self, exc):
        from mpcompat.diagnose.notes import note_missing_attribute
        self.what = "unpickling a task its parent sent"
        note_missing_attribute(exc)
        try:
            self.results.send((None, None, (False, exc)))
        except Exception:
            raise exc


def _make_worker(original):
    """``multiprocessing.pool.worker``, under the same name (a Process target, pickled by
    reference)."""

    @functools.wraps(original)
    def worker(inqueue, outqueue, initializer=None, initargs=(), maxtasks=None,
               wrap_exception=False):
        ends = (getattr(inqueue, "conn", None), getattr(inqueue, "results", None))
        if type(inqueue) is not types.SimpleNamespace or None in ends:  # not a channel: threads
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        _close_inherited()
        tasks = _Tasks(*ends)
        ends[1].send_bytes(STARTED)
        if initializer is not None:
            initializer = tasks.initializing(initializer)
        try:
            return original(tasks, tasks, initializer, initargs, maxtasks, wrap_exception)
        except Exception as exc:
            failed = exc
        except BaseException as exc:
            tasks.leaving()
            if isinstance(exc, SystemExit):
                from mpcompat.child_failures import channel
                channel.record(exc, what=tasks.what)
                raise
            failed = exc  # Ctrl-C: printed as Process._bootstrap prints it, but our frames
        _worker_failed(failed, tasks)
    return worker


def _close_inherited():
    """In a fork child: close the parent's ends of every channel (EOF must reach workers whose
    parent is gone)."""
    for dispatcher in list(_dispatchers):  # no lock: one a parent's thread held is not released
        for end in [e for w in list(dispatcher.ends) for e in (w.tasks, w.results)] + list(
                dispatcher.wake):
            end.close()
    _dispatchers.clear()


def _worker_failed(exc, tasks):
    """``exc`` ends this worker: record it for the parent, and exit with code 1. A start-up
    failure the parent has is told by the parent, once for the workers that fail alike
    (``pool_dispatcher._say_start_failure``); any other error prints its traceback, without
    mpcompat's frames."""
    from mpcompat.child_failures import channel
    from mpcompat.workers.user_frames import format_trimmed, innermost_user_frame
    where = innermost_user_frame(exc.__traceback__)
    where = "%s, line %d, in %s" % where if where else None
    starting = not tasks.asked
    parent = channel.record(
        exc, what=tasks.what + (" at " + where if where and starting else ""))
    if parent is not None and starting:
        raise SystemExit(1)
    import multiprocessing
    text = "Process %s:\n%s" % (multiprocessing.current_process().name, format_trimmed(exc))
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        pass
    raise SystemExit(1)  # Process._bootstrap: exit code 1, and nothing more printed


def _explaining(original):
    """A Pool result's ``get`` or ``next``: the error of a task that could not be pickled gets
    its note (``mpcompat.diagnose``, loaded then) as it is raised; the note on the workers'
    memory that the worker handler found due is said."""
    @functools.wraps(original)
    def call(self, timeout=None):
        try:
            return original(self, timeout)
        except Exception as exc:
            unexplained = exc.__dict__.pop(_UNEXPLAINED, None)
            if unexplained is not None:
                from mpcompat.diagnose.notes import pickling_failed
                pickling_failed(exc, unexplained.task, ForkingPickler, None, "send")
            from mpcompat.workers.user_frames import drop_own_frames  # (the user's thread)
            drop_own_frames(exc)
            raise
        finally:
            side = _loaded(_PARENT_SIDE)  # None: this process made no Pool
            if side is not None:
                side.say_memory(getattr(self, "_pool", None))
    return call


def _hooks(original, module):
    """The unbound replacements of the ``Pool`` methods of ``_HOOKED`` (``original``: name ->
    the original function; ``module``: ``multiprocessing.pool``): each calls the parent side's
    (:func:`mpcompat.workers.pool_dispatcher.hooks`); the original while that is not loaded."""
    made = {}

    def hooked(name):
        def hook(*args, **kwargs):
            try:
                if not made:
                    if name == "_setup_queues":  # a process Pool's __init__, the user's thread
                        # (waits while another thread's first Pool imports it)
                        from mpcompat.workers import pool_dispatcher
                        side = pool_dispatcher
                    else:
                        side = _loaded(_PARENT_SIDE)
                        if side is None:  # no Pool of this patch yet: this one is stock
                            return original[name](*args, **kwargs)
                    made.update(side.hooks(original, module))
                return made[name](*args, **kwargs)
            except BaseException as exc:  # the user reads their frames, not this hook's
                frames = _loaded("mpcompat.workers.user_frames")
                if frames is not None:
                    frames.drop_own_frames(exc)
                raise
        return functools.wraps(original[name])(hook)
    return {name: hooked(name) for name in _HOOKED}


def _loaded(name):
    """Module ``name`` once imported, else None: None too while another thread still runs its
    code (its first Pool), whose functions may not be defined yet."""
    module, finished = imported(name)
    return module if finished else None


def _keeping_notes(original):
    @functools.wraps(original)
    def __init__(self, exc, value):
        original(self, exc, value)
        if not isinstance(exc, BaseException):
            return  # being unpickled in the parent: the notes come with the state
        from mpcompat.diagnose.notes import add_note, notes_of, own_message
        found = notes_of(exc)
        if found and sys.version_info < (3, 11):
            self.exc = "%s(%r)" % (type(exc).__name__, own_message(exc))
            self.args = (self.exc, self.value)
        for text in found:
            add_note(self, text)
    return __init__


def _showing_notes(original):
    @functools.wraps(original)
    def __str__(self):
        from mpcompat.diagnose.notes import notes_of
        return "\n".join([original(self)] + notes_of(self))
    return __str__


def apply(module):
    """Hook ``worker``, the handlers of ``Pool`` and ``MaybeEncodingError`` of ``module``
    (``multiprocessing.pool``)."""
    if sys.platform == "win32":
        raise Skip("a Pool's worker channels need Unix pipes read without blocking")
    Pool = getattr(module, "Pool", None)
    encoding = getattr(module, "MaybeEncodingError", None)
    results = [(getattr(module, cls, None), name) for cls, name in (
        ("ApplyResult", "get"), ("IMapIterator", "next"), ("IMapIterator", "__next__"))]
    if not callable(getattr(module, "worker", None)) or not isinstance(Pool, type) or not all(
            name in Pool.__dict__ if kind is None else isinstance(Pool.__dict__.get(name), kind)
            for name, kind in _HOOKED.items()) or not all(
            callable(getattr(cls, "__dict__", {}).get(name)) for cls, name in results) or \
            not isinstance(encoding, type) or "__init__" not in encoding.__dict__:
        raise Skip("multiprocessing.pool lacks the worker, Pool, result or MaybeEncodingError "
                   "parts this patch hooks")
    patcher.replace(module, "worker", _make_worker(patcher.original(module, "worker")))
    original = {name: patcher.original(Pool, name) for name in _HOOKED}
    original = {name: getattr(f, "__func__", f) for name, f in original.items()}
    for name, hook in _hooks(original, module).items():
        patcher.replace(Pool, name, _HOOKED[name](hook) if _HOOKED[name] else hook)
    for cls, name in results:
        patcher.replace(cls, name, _explaining(patcher.original(cls, name)))
    patcher.replace(encoding, "__init__", _keeping_notes(patcher.original(encoding, "__init__")))
    if sys.version_info < (3, 11):
        patcher.replace(encoding, "__str__", _showing_notes(patcher.original(encoding,
                                                                             "__str__")))


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
