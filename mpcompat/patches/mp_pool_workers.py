"""Patch ``multiprocessing.pool_workers``: a Pool never loses a task, never respawns dying
workers forever, and names what it cannot send back.

One mechanism, billiard's: **each worker acknowledges the task it takes.** The worker's task
queue, as the worker function sees it, sends ``(pid, job, index)`` on the result pipe right after
taking a task and before running it. The parent's result-handler thread reads those
acknowledgements, so it knows at every moment which task each worker holds. When the
worker-handler thread reaps a dead worker, it sends a death notice down the same pipe: the
result handler reads it after everything the dead worker sent (the pipe keeps order), so a
task still held then is lost, and its result fails at once with :class:`WorkerLostError`
(pid, exit code or signal by name, the likely cause, the worker's own recorded error). The
pool replaces the worker as before and goes on.

What else each part covers:

- A task the worker cannot unpickle (an instance of a class defined under the main guard)
  fails as that task's result, with the main-guard note; the worker goes on.
- A result the parent cannot unpickle (an exception class whose ``__init__`` takes other
  arguments) fails that task with the reason, instead of killing the result-handler thread.
- Start-up failures: workers that die before taking any task, recording a start-up error
  (their initializer raised; a spawn child could not start), ``max(3, processes)`` in a row
  and for at least ``GRACE`` seconds with no task taken meanwhile, break the pool: it starts
  no new workers, its pending results fail with :class:`BrokenPool`, and ``_check_running``
  refuses new work with it. A failure that lasts less than ``GRACE`` seconds (a service still
  starting) is ridden out, as the standard library does.
- Workers that exit at ``maxtasksperchild``, or from a KeyboardInterrupt while waiting, lose
  nothing and break nothing. A ThreadPool is not touched.
- ``MaybeEncodingError`` (a result the worker cannot pickle) keeps the path to the part that
  cannot be pickled (the note of ``multiprocessing.pickling_notes``).
"""
import functools
import os
import pickletools
import sys
import threading
import time
import weakref
from multiprocessing.reduction import ForkingPickler

from mpcompat.patching.patcher import Patcher
from mpcompat.patching.table import Skip

__all__ = ["GRACE", "MIN_FAILURES", "apply", "revert"]

GRACE = 3.0       # seconds of nothing but start-up failures before a pool breaks
MIN_FAILURES = 3  # and at least max(MIN_FAILURES, processes) of them in a row
TASK_STAGE = "running a task"
# Messages of mpcompat on the result pipe: (None, kind, data). A result handler that is not
# ours reads them as results of job None, which it ignores.
_ACK, _DEATH, _BREAK = 0, 1, 2

patcher = Patcher()
_local = threading.local()  # .tracker, in the worker-handler thread of a process pool
_trackers = {}              # id(pool cache) -> _Tracker
_trackers_lock = threading.Lock()


# --- the worker's side ----------------------------------------------------------------------

class _Tasks(object):
    """A worker's task queue as the worker function sees it: each task taken is acknowledged
    to the parent before it runs; a task that cannot be unpickled fails as its own result."""

    def __init__(self, inqueue, outqueue):
        self._inqueue, self._put = inqueue, outqueue.put
        self._pid = os.getpid()
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
                self._put((None, _ACK, (self._pid, task[0], task[1])))
            return task

    def _unreadable(self, data, exc):
        """Send the failure back as the task's result; raise it if the task is unknown."""
        self.what = "unpickling a task its parent sent"
        try:
            from mpcompat.diagnose import main_guard
            main_guard.note_missing_attribute(exc)
        except Exception:
            pass
        ids = _task_ids(data)
        if ids is None:
            raise exc
        try:
            self._put((ids[0], ids[1], (False, exc)))
        except Exception:
            raise exc


def _make_worker(original):
    """``multiprocessing.pool.worker``, the same function as far as pickle can tell (a Process
    target, sent by reference to spawn and forkserver children)."""

    @functools.wraps(original)
    def worker(inqueue, outqueue, initializer=None, initargs=(), maxtasks=None,
               wrap_exception=False):
        if not hasattr(inqueue, "_reader"):  # a ThreadPool's thread
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        tasks = _Tasks(inqueue, outqueue)
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
            if not isinstance(exc, KeyboardInterrupt) and not (
                    isinstance(exc, SystemExit) and exc.code in (None, 0)):
                from mpcompat.workers import child_failures
                child_failures.record(exc, what=tasks.what)
            raise
    return worker


# --- the parent's side ------------------------------------------------------------------------

class _Tracker(object):
    """What the parent knows of one process pool's workers: the task each one holds (read by
    the result-handler thread) and the start-up failures (seen by the worker-handler thread)."""

    def __init__(self, cache, outqueue):
        self.cache, self.outqueue = cache, outqueue
        self.held = {}        # worker pid -> (job, index) it took and has not answered
        self.holder = {}      # (job, index) -> worker pid
        self.taken = 0        # tasks taken so far (progress, for the start-up rule)
        self.working = set()  # pids of live workers that took a task
        self.workers = None   # the pool's list of worker processes
        self.processes = 1
        self.failures = []    # (pid, exitcode, record) of start-up failures in a row
        self.since = None     # (time, self.taken) at the first of them
        self.broken = None    # (message, pids, exitcodes, note) once broken

    # The result-handler thread.
    def reader(self, connection):
        """A ``get`` for ``Pool._handle_results`` that handles mpcompat's messages itself."""
        receive = getattr(connection, "_recv_bytes", None)
        if receive is None:  # pragma: no cover (every CPython 3.8-3.15 has it)
            receive = connection.recv_bytes
        loads, holder, held = ForkingPickler.loads, self.holder, self.held

        def get():
            while True:
                data = receive()
                if not isinstance(data, bytes):
                    data = data.getbuffer()
                try:
                    message = loads(data)
                except Exception as exc:
                    self._unreadable(bytes(data), exc)
                    continue
                if message.__class__ is tuple and len(message) == 3:
                    if message[0] is None:
                        self._notice(message[1], message[2])
                        continue
                    pid = holder.pop((message[0], message[1]), None)
                    if pid is not None:
                        held.pop(pid, None)
                return message
        return get

    def _notice(self, kind, data):
        if kind == _ACK:
            pid, job, index = data
            self.held[pid] = (job, index)
            self.holder[(job, index)] = pid
            self.taken += 1
            self.working.add(pid)
        elif kind == _DEATH:
            pid, exitcode, record = data
            self.working.discard(pid)
            ids = self.held.pop(pid, None)
            if ids is not None:
                self.holder.pop(ids, None)
                self._fail(ids[0], ids[1], _lost(pid, exitcode, record))
        elif kind == _BREAK:
            for job, result in list(self.cache.items()):
                _fail_whole(self.cache, job, result, self.broken_error)

    def _fail(self, job, index, error):
        result = self.cache.get(job)
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
        pid = self.holder.pop(ids, None)
        if pid is not None:
            self.held.pop(pid, None)
        self._fail(ids[0], ids[1], exc)

    # The worker-handler thread.
    def reaped(self, workers):
        """``workers`` exited and were joined: tell the result handler, count start-ups."""
        from mpcompat.workers import child_failures
        for w in workers:
            record = child_failures.take(w.pid) if w.exitcode else None
            self._send((None, _DEATH, (w.pid, w.exitcode, record)))
            if w.exitcode and w.exitcode > 0 and record and record.get("what") != TASK_STAGE:
                if self.since is None or self.since[1] != self.taken:
                    self.failures, self.since = [], (time.monotonic(), self.taken)
                self.failures.append((w.pid, w.exitcode, record))
            else:
                self.failures, self.since = [], None
        if (self.broken is None and len(self.failures) >= max(MIN_FAILURES, self.processes)
                and self.since[1] == self.taken and time.monotonic() - self.since[0] >= GRACE
                and not any(w.pid in self.working for w in list(self.workers))):
            self._break()

    def backoff(self):
        """Seconds to wait before starting new workers while they keep failing to start."""
        return min(0.05 * len(self.failures), 0.5)

    def _break(self):
        pids = [pid for pid, _, _ in self.failures]
        codes = [code for _, code, _ in self.failures]
        self.broken = (_broken_message(pids, codes, time.monotonic() - self.since[0]), pids,
                       codes, _records_note(self.failures))
        self.failures = []
        self._send((None, _BREAK, None))

    def broken_error(self):
        """A new BrokenPool for one result (each raise gets its own traceback)."""
        from mpcompat.diagnose.notes import add_note
        from mpcompat.errors import BrokenPool
        message, pids, codes, note = self.broken
        exc = BrokenPool(message, pids, codes)
        add_note(exc, note)
        return exc

    def _send(self, message):
        queue = self.outqueue
        data = ForkingPickler.dumps(message)
        lock = queue._wlock
        # A worker killed while writing holds the lock for ever: then the pool is wedged as
        # it would be without mpcompat, and this thread must not hang with it.
        if lock is not None and not lock.acquire(True, 5.0):
            return
        try:
            queue._writer.send_bytes(data)
        finally:
            if lock is not None:
                lock.release()


def _tracker(cache, outqueue):
    with _trackers_lock:
        tracker = _trackers.get(id(cache))
        if tracker is None:
            tracker = _trackers[id(cache)] = _Tracker(cache, outqueue)
            weakref.finalize(cache, _trackers.pop, id(cache), None)
        return tracker


def _fail_whole(cache, job, result, error):
    """Fail what ``result`` still waits for."""
    try:
        if hasattr(result, "_number_left"):  # MapResult: its remaining chunks
            while result._number_left > 0 and cache.get(job) is result:
                result._set(0, (False, error()))
        elif hasattr(result, "_items"):  # IMapIterator: the item waited for next
            result._set(result._index, (False, error()))
        else:
            result._set(0, (False, error()))
    except Exception:
        pass


def _lost(pid, exitcode, record):
    from mpcompat.diagnose.notes import PREFIX, add_note
    from mpcompat.errors import WorkerLostError
    from mpcompat.workers.exits import describe_exit, exit_hint
    how = describe_exit(exitcode)
    exc = WorkerLostError("the Pool worker process %d died while running this task (%s)"
                          % (pid, how), pid, exitcode)
    lines = [exit_hint(exitcode)] if exit_hint(exitcode) else []
    if record:
        lines.append("The worker's own error: " + _record_text(record))
    lines.append("The task's result is lost; the Pool goes on with a new worker.")
    add_note(exc, PREFIX + "\n".join(lines))
    return exc


def _record_text(record):
    text = record.get("error", "")
    if record.get("what"):
        text += "\n(while %s)" % record["what"]
    return "\n".join([text] + list(record.get("notes") or ()))


def _records_note(failures):
    """Each distinct error of the workers in ``failures`` once, with the pids that had it."""
    from mpcompat.diagnose.notes import PREFIX
    by_text = {}
    for pid, _, record in failures:
        by_text.setdefault(_record_text(record), []).append(pid)
    parts = []
    for text, pids in by_text.items():
        parts.append("Pool worker process (pid %d) failed while starting: %s" % (pids[0], text))
        if len(pids) > 1:
            parts[-1] += "\n(%d more workers failed the same way)" % (len(pids) - 1)
    return PREFIX + "\n\n".join(parts)


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
            if isinstance(arg, int) and op.name in ("BININT", "BININT1", "BININT2", "LONG1",
                                                    "LONG4", "INT", "LONG"):
                values.append(arg)
                if len(values) == 2:
                    return tuple(values)
                continue
            return None
    except Exception:
        return None
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

def _hooks(module):
    Pool = module.Pool
    original = {name: patcher.original(Pool, name) for name in (
        "_handle_workers", "_handle_results", "_maintain_pool", "_join_exited_workers",
        "_get_worker_sentinels")}
    handle_workers = original["_handle_workers"].__func__
    handle_results = original["_handle_results"].__func__
    maintain = original["_maintain_pool"].__func__
    join_exited = original["_join_exited_workers"].__func__
    sentinels_of = original["_get_worker_sentinels"].__func__
    check_running = patcher.original(Pool, "_check_running")

    @functools.wraps(handle_workers)
    def _handle_workers(cls, cache, taskqueue, ctx, Process, processes, pool, inqueue,
                        outqueue, *args, **kwargs):
        if not hasattr(inqueue, "_reader"):  # a ThreadPool
            return handle_workers(cls, cache, taskqueue, ctx, Process, processes, pool,
                                  inqueue, outqueue, *args, **kwargs)
        tracker = _tracker(cache, outqueue)
        tracker.workers, tracker.processes, tracker.inqueue = pool, processes, inqueue
        _local.tracker = tracker
        try:
            return handle_workers(cls, cache, taskqueue, ctx, Process, processes, pool,
                                  inqueue, outqueue, *args, **kwargs)
        finally:
            _local.tracker = None

    @functools.wraps(handle_results)
    def _handle_results(outqueue, get, cache):
        reader = getattr(outqueue, "_reader", None)
        if reader is None or get != reader.recv:  # a ThreadPool, or a get of somebody else
            return handle_results(outqueue, get, cache)
        return handle_results(outqueue, _tracker(cache, outqueue).reader(reader), cache)

    def _watched(pool):
        tracker = getattr(_local, "tracker", None)
        return tracker if tracker is not None and tracker.workers is pool else None

    @functools.wraps(join_exited)
    def _join_exited_workers(pool):
        tracker = _watched(pool)
        if tracker is None:
            return join_exited(pool)
        before = list(pool)
        cleaned = join_exited(pool)
        if cleaned:
            tracker.reaped([w for w in before if w not in pool])
        return cleaned

    @functools.wraps(maintain)
    def _maintain_pool(ctx, Process, processes, pool, inqueue, *args, **kwargs):
        tracker = _watched(pool)
        if tracker is None:
            return maintain(ctx, Process, processes, pool, inqueue, *args, **kwargs)
        if tracker.broken is None:
            if tracker.failures and any(w.exitcode is not None for w in list(pool)):
                time.sleep(tracker.backoff())  # no flood of workers that fail the same way
            return maintain(ctx, Process, processes, pool, inqueue, *args, **kwargs)
        module.Pool._join_exited_workers(pool)
        _drain(inqueue)  # tasks already failed: keep the task handler from blocking on them

    @functools.wraps(sentinels_of)
    def _get_worker_sentinels(workers):
        sentinels = sentinels_of(workers)
        tracker = _watched(workers)
        if tracker is not None and tracker.broken is not None:
            sentinels.append(tracker.inqueue._reader)  # wake up to drain what still comes
        return sentinels

    @functools.wraps(check_running)
    def _check_running(self):
        check_running(self)
        tracker = _trackers.get(id(getattr(self, "_cache", None)))
        if tracker is not None and tracker.broken is not None and tracker.cache is self._cache:
            raise tracker.broken_error()

    return {"_handle_workers": classmethod(_handle_workers),
            "_handle_results": staticmethod(_handle_results),
            "_maintain_pool": staticmethod(_maintain_pool),
            "_join_exited_workers": staticmethod(_join_exited_workers),
            "_get_worker_sentinels": staticmethod(_get_worker_sentinels),
            "_check_running": _check_running}


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
        from mpcompat.diagnose.notes import PREFIX
        notes = [n for n in (self.__dict__.get("__notes__") or ())
                 if isinstance(n, str) and n.startswith(PREFIX)]
        return "\n".join([original(self)] + notes)
    return __str__


def apply(module):
    """Hook ``worker``, the handlers of ``Pool`` and ``MaybeEncodingError`` of ``module``
    (``multiprocessing.pool``)."""
    Pool = getattr(module, "Pool", None)
    encoding = getattr(module, "MaybeEncodingError", None)
    kinds = {"_handle_workers": classmethod, "_handle_results": staticmethod,
             "_maintain_pool": staticmethod, "_join_exited_workers": staticmethod,
             "_get_worker_sentinels": staticmethod}
    if not callable(getattr(module, "worker", None)) or not isinstance(Pool, type) or not all(
            isinstance(Pool.__dict__.get(name), kind) for name, kind in kinds.items()) or \
            "_check_running" not in Pool.__dict__ or not isinstance(encoding, type) or \
            "__init__" not in encoding.__dict__:
        raise Skip("multiprocessing.pool lacks the worker, Pool or MaybeEncodingError parts "
                   "this patch hooks")
    patcher.replace(module, "worker", _make_worker(patcher.original(module, "worker")))
    for name, hook in _hooks(module).items():
        patcher.replace(Pool, name, hook)
    patcher.replace(encoding, "__init__", _keeping_notes(patcher.original(encoding, "__init__")))
    if sys.version_info < (3, 11):
        patcher.replace(encoding, "__str__", _showing_notes(patcher.original(encoding,
                                                                             "__str__")))


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
