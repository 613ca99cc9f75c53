"""Patch ``multiprocessing.pool_workers``: a Pool never loses a task, never respawns dying
workers forever, and names what it cannot send back (patches.md).

Billiard's mechanism: each worker has a slot in a shared-memory array of its pool (on its
Process object, so every start method carries it) where it writes ``(job, index, busy)`` after
taking a task and clears ``busy`` just before sending the result. A worker reaped busy: a death
notice down the result pipe fails that task with :class:`WorkerLostError`. Workers that die
before taking any task, having recorded a start-up error, ``max(MIN_FAILURES, processes)`` in a
row for ``GRACE`` seconds break the pool (:class:`BrokenPool`). A task or result that cannot be
unpickled fails as that task's result; ``MaybeEncodingError`` keeps its notes. A ThreadPool is
not touched.
"""
import functools
import pickletools
import sys
import threading
import time
import weakref
from multiprocessing.reduction import ForkingPickler

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import Skip

__all__ = ["GRACE", "MIN_FAILURES", "apply", "revert"]

GRACE = 3.0       # seconds of nothing but start-up failures before a pool breaks
MIN_FAILURES = 3  # and at least max(MIN_FAILURES, processes) of them in a row
TASK_STAGE = "running a task"
# Messages of mpcompat on the result pipe: (None, kind, data). A result handler that is not
# ours reads them as results of job None, which it ignores.
_DEATH, _BREAK = 1, 2
SLOT_ATTRIBUTE = "_mpcompat_slot"  # on a worker's Process object: (shared array, slot number)
# What the patch replaces on Pool, and how Pool binds it (None: a plain method).
_HOOKED = {"_repopulate_pool_static": staticmethod, "_handle_workers": classmethod,
           "_handle_results": staticmethod, "_maintain_pool": staticmethod,
           "_join_exited_workers": staticmethod, "_get_worker_sentinels": staticmethod,
           "_terminate_pool": classmethod, "_check_running": None, "_map_async": None}

patcher = Patcher()
_trackers = {}  # id(pool result queue) -> _Tracker, made in Pool.__init__


class _Thread(threading.local):
    """``tracker``: in a pool's worker-handler thread, its pool's; ``task``: in a worker, the
    function of the task it runs."""
    tracker = task = None


this_thread = _Thread()


# --- the worker's side ----------------------------------------------------------------------

class _Slot(object):
    """A worker's slot in its pool's shared array: ``[job, index, busy, tasks taken]``."""

    def __init__(self, array, index):
        self.array, self.index, self.base = array, index, 4 * index

    def took(self, job, index):
        array, base = self.array, self.base
        array[base], array[base + 1] = job, index
        array[base + 3] += 1
        array[base + 2] = 1  # last: busy only once the task's ids are there

    def done(self):
        self.array[self.base + 2] = 0  # the result is being sent: no longer at risk

    def read(self):
        return tuple(self.array[self.base:self.base + 4])


class _Tasks(object):
    """A worker's task queue that writes each task taken to the worker's slot; a task that
    cannot be unpickled fails as its own result."""

    def __init__(self, inqueue, outqueue, slot):
        self._inqueue, self._put, self._slot = inqueue, outqueue.put, slot
        self.what = "starting"

    def __getattr__(self, name):  # _reader, _writer, ... as the real queue has them
        return getattr(self._inqueue, name)

    def get(self):
        """The next task (None: stop), acknowledged; the same as ``SimpleQueue.get`` else."""
        queue = self._inqueue
        while True:
            with queue._rlock:
                data = queue._reader.recv_bytes()
            try:
                task = ForkingPickler.loads(data)
            except Exception as exc:
                self._unreadable(data, exc)
                continue
            if task is not None:
                self.what = TASK_STAGE
                this_thread.task = task[2]
                if self._slot is not None:
                    self._slot.took(task[0], task[1])
            return task

    def _unreadable(self, data, exc):
        # Sent back as the task's result; raised (the worker dies) if the task is unknown.
        from mpcompat.diagnose.notes import note_missing_attribute
        self.what = "unpickling a task its parent sent"
        note_missing_attribute(exc)
        ids = _task_ids(data)
        if ids is None:
            raise exc
        try:
            self._put((ids[0], ids[1], (False, exc)))
        except Exception:
            raise exc


class _Results(object):
    """A worker's result queue that clears ``busy`` in the worker's slot before each put."""

    def __init__(self, outqueue, slot):
        self._outqueue, self._slot = outqueue, slot

    def __getattr__(self, name):
        return getattr(self._outqueue, name)

    def put(self, obj):
        self._slot.done()
        self._outqueue.put(obj)


def _make_worker(original):
    """``multiprocessing.pool.worker``, under the same name (a Process target, pickled by
    reference)."""

    @functools.wraps(original)
    def worker(inqueue, outqueue, initializer=None, initargs=(), maxtasks=None,
               wrap_exception=False):
        if not hasattr(inqueue, "_reader"):  # a ThreadPool's thread
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        import multiprocessing
        slot = getattr(multiprocessing.current_process(), SLOT_ATTRIBUTE, None)
        slot = _Slot(*slot) if slot is not None else None
        tasks = _Tasks(inqueue, outqueue, slot)
        if slot is not None:
            outqueue = _Results(outqueue, slot)
        if initializer is not None:
            user_initializer = initializer

            def initializer(*args):
                tasks.what = "running the Pool's initializer %s()" % (
                    getattr(user_initializer, "__qualname__", None) or repr(user_initializer))
                user_initializer(*args)
                tasks.what = "waiting for a task"
        try:
            return original(tasks, outqueue, initializer, initargs, maxtasks, wrap_exception)
        except BaseException as exc:
            from mpcompat.workers import child_failures
            child_failures.record(exc, what=tasks.what)
            raise
    return worker


# --- the parent's side ------------------------------------------------------------------------

class _Tracker(object):
    """The parent's view of one process pool's workers: their slots, start-up failures and
    the notices on the result pipe."""

    def __init__(self, outqueue, processes):
        from multiprocessing.sharedctypes import RawArray
        # Weakly, as the cache (its results hold the Pool): _trackers keeps this tracker
        # until the result queue is freed.
        self.outqueue, self.processes = weakref.ref(outqueue), processes
        self.array = RawArray("q", 4 * processes)
        self.free = list(range(processes))
        self.slots = {}       # worker Process -> its _Slot
        self.taken = 0        # tasks taken by workers reaped so far
        self.cache = lambda: None
        self.workers = self.inqueue = None
        self.failures = []    # (pid, exitcode, record) of start-up failures in a row
        self.since = None     # (time, progress) at the first of them
        self.broken = None    # (message, pids, exitcodes, note) once broken

    def starting(self, Process):
        """A ``Pool.Process`` that gives each worker it makes a slot."""
        def make(ctx, *args, **kwargs):
            worker = Process(ctx, *args, **kwargs)
            if self.free:
                index = self.free.pop()
                self.slots[worker] = _Slot(self.array, index)
                self.array[4 * index:4 * index + 4] = [0, 0, 0, 0]
                setattr(worker, SLOT_ATTRIBUTE, (self.array, index))
            return worker
        return make

    def progress(self):
        """Tasks taken so far by this pool's workers."""
        return self.taken + sum(slot.read()[3] for slot in list(self.slots.values()))

    def reaped(self, workers):
        """``workers`` exited and were joined: fail the task each one held, count start-ups."""
        from mpcompat.workers import child_failures
        for w in workers:
            slot = self.slots.pop(w, None)
            job = index = busy = taken = 0
            if slot is not None:
                job, index, busy, taken = slot.read()
                self.free.append(slot.index)
            self.taken += taken
            record = child_failures.take(w.pid) if w.exitcode else None
            if busy:
                self._send((None, _DEATH, (w.pid, w.exitcode, record, job, index)))
            if w.exitcode and w.exitcode > 0 and not taken and record and \
                    record.get("what") != TASK_STAGE:
                progress = self.progress()
                if self.since is None or self.since[1] != progress:
                    self.failures, self.since = [], (time.monotonic(), progress)
                self.failures.append((w.pid, w.exitcode, record))
            else:
                self.failures, self.since = [], None
        if (self.broken is None and len(self.failures) >= max(MIN_FAILURES, self.processes)
                and self.since[1] == self.progress()
                and time.monotonic() - self.since[0] >= GRACE
                and not any(slot.read()[3] for slot in list(self.slots.values()))):
            pids, codes, records = (list(column) for column in zip(*self.failures))
            self.broken = (_broken_message(pids, codes, time.monotonic() - self.since[0]),
                           pids, codes,
                           child_failures.describe(records, "Pool worker process", tally=True))
            self.failures = []
            self._send((None, _BREAK, None))

    def broken_error(self):
        """A new BrokenPool (each raise gets its own traceback)."""
        from mpcompat.diagnose.notes import add_note
        from mpcompat.errors import BrokenPool
        message, pids, codes, note = self.broken
        exc = BrokenPool(message, pids, codes)
        add_note(exc, note)
        return exc

    def _send(self, message):
        queue = self.outqueue()
        if queue is None:
            return
        data = ForkingPickler.dumps(message)
        lock = queue._wlock
        # A worker killed while writing holds the lock for ever: the pool is wedged as it
        # would be without mpcompat, and this thread must not hang with it.
        if lock is not None and not lock.acquire(True, 5.0):
            return
        try:
            queue._writer.send_bytes(data)
        finally:
            if lock is not None:
                lock.release()

    def reader(self, connection):
        """A ``get`` for ``Pool._handle_results`` that handles mpcompat's notices itself."""
        receive, loads = connection._recv_bytes, ForkingPickler.loads

        def get():
            while True:
                data = receive().getbuffer()
                try:
                    message = loads(data)
                except Exception as exc:
                    self._unreadable(bytes(data), exc)
                    continue
                if message.__class__ is not tuple or len(message) != 3 or \
                        message[0] is not None:
                    return message
                if message[1] == _DEATH:
                    pid, exitcode, record, job, index = message[2]
                    self._fail(job, index, _lost(pid, exitcode, record))
                elif message[1] == _BREAK:
                    cache = self.cache() or {}
                    for job, result in list(cache.items()):
                        _fail_whole(cache, job, result, self.broken_error)
        return get

    def _fail(self, job, index, error):
        result = (self.cache() or {}).get(job)
        if result is not None:
            try:
                result._set(index, (False, error))
            except Exception:
                pass  # a callback that raised: the result is set all the same

    def _unreadable(self, data, exc):
        ids = _task_ids(data)
        if ids is None:
            raise exc
        from mpcompat.diagnose.notes import PREFIX, add_note
        names = ", ".join(_classes(data)) or "its contents"
        add_note(exc, PREFIX + (
            "the result of this task could not be rebuilt in this process: unpickling %s "
            "raised %s: %s. An exception class whose __init__ takes other arguments than its "
            "message must pass them all to Exception.__init__ (super().__init__(a, b)) or "
            "define __reduce__, so that pickle can rebuild it." % (
                names, type(exc).__name__, exc)))
        self._fail(ids[0], ids[1], exc)


def _tracker(outqueue, processes=None):
    """The tracker of the pool of result queue ``outqueue``; made when ``processes`` is given
    (in ``Pool.__init__``, before the pool's threads start)."""
    tracker = _trackers.get(id(outqueue))
    if tracker is None and processes is not None:
        tracker = _trackers[id(outqueue)] = _Tracker(outqueue, processes)
        weakref.finalize(outqueue, _trackers.pop, id(outqueue), None)
    return tracker


def _fail_whole(cache, job, result, error):
    try:
        if hasattr(result, "_number_left"):  # MapResult: its remaining chunks
            while result._number_left > 0 and cache.get(job) is result:
                result._set(0, (False, error()))
        else:  # IMapIterator: the item waited for next; ApplyResult
            result._set(getattr(result, "_index", 0), (False, error()))
    except Exception:
        pass


def _lost(pid, exitcode, record):
    from mpcompat.diagnose.notes import PREFIX, add_note
    from mpcompat.errors import WorkerLostError
    from mpcompat.workers.exits import dead_lines, describe_exit
    exc = WorkerLostError("the Pool worker process %d died while running this task (%s)"
                          % (pid, describe_exit(exitcode)), pid, exitcode)
    lines = dead_lines(exitcode, record, "The worker's own error: ")
    lines.append("The task's result is lost; the Pool goes on with a new worker.")
    add_note(exc, PREFIX + "\n".join(lines))
    return exc


def _broken_message(pids, exitcodes, seconds):
    from mpcompat.workers.exits import describe_exit
    shown = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    return ("%d worker processes of this Pool failed while starting, in a row for %.1f s (%s), "
            "and none took a task (pids %s). The Pool starts no new workers, and its pending "
            "and new tasks fail with this error." % (
                len(pids), seconds, ", ".join(sorted(set(map(describe_exit, exitcodes)))),
                shown))


def _task_ids(data):
    """``(job, index)`` at the start of a pickled task or result, read without unpickling."""
    values = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("PROTO", "FRAME", "MARK"):
                continue
            if not isinstance(arg, int) or op.name not in (
                    "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"):
                return None
            values.append(arg)
            if len(values) == 2:
                return tuple(values)
    except Exception:
        pass
    return None


def _classes(data):
    """The classes a pickle names, but multiprocessing's own: ``["__main__.WeirdError"]``."""
    names, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if isinstance(arg, str):
                strings.append(arg)
            if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append("%s.%s" % (strings[-2], strings[-1]))
            elif op.name == "GLOBAL":
                names.append(arg.replace(" ", "."))
    except Exception:
        pass
    return [n for n in dict.fromkeys(names) if not n.startswith(("multiprocessing.",
                                                                  "builtins."))]


# --- the hooks ----------------------------------------------------------------------------------

def _hooks(original):
    """The unbound replacements of the ``Pool`` methods of ``_HOOKED`` (``original``: name ->
    the original function)."""

    def _repopulate_pool_static(ctx, Process, processes, pool, inqueue, outqueue, *args):
        if hasattr(outqueue, "_reader"):  # a process pool (not a ThreadPool)
            tracker = _tracker(outqueue, processes)
            if tracker.broken is not None:
                # Broken by the reaping just before (_maintain_pool): no new worker, and no
                # fork while the user's threads go on (a fork copies their locks).
                return None
            Process = tracker.starting(Process)
        return original["_repopulate_pool_static"](ctx, Process, processes, pool, inqueue,
                                                   outqueue, *args)

    def _handle_workers(cls, cache, taskqueue, ctx, Process, processes, pool, inqueue,
                        outqueue, *args, **kwargs):
        tracker = _tracker(outqueue)
        if tracker is not None:
            tracker.cache, tracker.workers, tracker.inqueue = weakref.ref(cache), pool, inqueue
        this_thread.tracker = tracker
        try:
            return original["_handle_workers"](cls, cache, taskqueue, ctx, Process, processes,
                                               pool, inqueue, outqueue, *args, **kwargs)
        finally:
            this_thread.tracker = None

    def _handle_results(outqueue, get, cache):
        reader = getattr(outqueue, "_reader", None)
        tracker = _tracker(outqueue)
        if tracker is None or get != reader.recv:  # a ThreadPool, or a get of somebody else
            return original["_handle_results"](outqueue, get, cache)
        tracker.cache = weakref.ref(cache)
        return original["_handle_results"](outqueue, tracker.reader(reader), cache)

    def _watched(pool):
        tracker = this_thread.tracker
        return tracker if tracker is not None and tracker.workers is pool else None

    def _join_exited_workers(pool):
        tracker = _watched(pool)
        before = list(pool) if tracker is not None else None
        cleaned = original["_join_exited_workers"](pool)
        if cleaned and tracker is not None:
            tracker.reaped([w for w in before if w not in pool])
        return cleaned

    def _maintain_pool(ctx, Process, processes, pool, inqueue, *args, **kwargs):
        tracker = _watched(pool)
        if tracker is not None and tracker.failures and \
                any(w.exitcode is not None for w in list(pool)):
            # No flood of workers that fail the same way: wait longer after each failure.
            time.sleep(min(0.05 * len(tracker.failures), 0.5))
        return original["_maintain_pool"](ctx, Process, processes, pool, inqueue, *args,
                                          **kwargs)

    def _get_worker_sentinels(workers):
        sentinels = original["_get_worker_sentinels"](workers)
        tracker = _watched(workers)
        if tracker is not None and tracker.broken is not None:
            # Broken: this thread reads the tasks (their results failed), so that the task
            # handler never blocks on a full pipe; woken up by what still comes.
            _drain(tracker.inqueue)
            sentinels.append(tracker.inqueue._reader)
        return sentinels

    def _terminate_pool(cls, taskqueue, inqueue, outqueue, pool, *args, **kwargs):
        try:
            return original["_terminate_pool"](cls, taskqueue, inqueue, outqueue, pool, *args,
                                               **kwargs)
        finally:
            if _tracker(outqueue) is not None:  # workers that died unreaped: nobody will ask
                from mpcompat.workers import child_failures
                child_failures.discard([w.pid for w in list(pool) if w.pid])

    def _check_running(self):
        original["_check_running"](self)
        tracker = _trackers.get(id(getattr(self, "_outqueue", None)))
        if tracker is not None and tracker.broken is not None and \
                tracker.outqueue() is self._outqueue:
            raise tracker.broken_error()

    def _map_async(self, *args, **kwargs):
        try:
            return original["_map_async"](self, *args, **kwargs)
        except ZeroDivisionError:  # no worker left to size chunks by: broken since the check?
            _check_running(self)
            raise

    return {hook.__name__: hook for hook in (
        _repopulate_pool_static, _handle_workers, _handle_results, _join_exited_workers,
        _maintain_pool, _get_worker_sentinels, _terminate_pool, _check_running, _map_async)}


def _drain(inqueue):
    """Throw away the tasks waiting in a broken pool's task pipe (their results failed)."""
    lock = inqueue._rlock
    if not lock.acquire(True, 0.1):  # terminate() holds it: the pool is going away
        return
    try:
        while inqueue._reader.poll():
            inqueue._reader.recv_bytes()
    except (OSError, EOFError):
        pass
    finally:
        lock.release()


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
    Pool = getattr(module, "Pool", None)
    encoding = getattr(module, "MaybeEncodingError", None)
    if not callable(getattr(module, "worker", None)) or not isinstance(Pool, type) or not all(
            name in Pool.__dict__ if kind is None else isinstance(Pool.__dict__.get(name), kind)
            for name, kind in _HOOKED.items()) or \
            not isinstance(encoding, type) or "__init__" not in encoding.__dict__:
        raise Skip("multiprocessing.pool lacks the worker, Pool or MaybeEncodingError parts "
                   "this patch hooks")
    patcher.replace(module, "worker", _make_worker(patcher.original(module, "worker")))
    original = {name: patcher.original(Pool, name) for name in _HOOKED}
    original = {name: getattr(f, "__func__", f) for name, f in original.items()}
    for name, hook in _hooks(original).items():
        hook = functools.wraps(original[name])(hook)
        patcher.replace(Pool, name, _HOOKED[name](hook) if _HOOKED[name] else hook)
    patcher.replace(encoding, "__init__", _keeping_notes(patcher.original(encoding, "__init__")))
    if sys.version_info < (3, 11):
        patcher.replace(encoding, "__str__", _showing_notes(patcher.original(encoding,
                                                                             "__str__")))


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
