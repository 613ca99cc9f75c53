"""Patch ``multiprocessing.pool_workers``: a Pool whose workers die starting up fails fast, with
their error; a result that cannot be pickled is named.

1. Fail fast. A ``multiprocessing.Pool`` replaces every worker process that exits, whatever
   the reason, so a worker that dies while starting (its initializer raises, a spawn child
   re-runs a script that lacks a main guard, a child cannot unpickle what it is sent) is
   replaced by one that dies the same way, for ever, and ``map()`` never returns. The pool's
   worker-handler thread (``Pool._handle_workers``, one per pool) is wrapped to watch its pool,
   and ``Pool._maintain_pool`` (called by that thread each time it wakes up) looks at the
   workers that exited: after ``max(3, processes)`` worker exits with an error (exit code > 0)
   in a row, without any task done in between (judged from the pool's pending results), and
   unless a worker alive now has outlived ``processes`` such failures (it started well), the
   pool is broken: it starts no new workers, its pending results fail with
   :class:`BrokenPool`, and so do the tasks sent to it later (the worker-handler thread takes
   them off the task queue and fails them). The error names the children's own error, which
   they record with ``mpcompat.workers.child_failures``. Workers that exit with code 0 (at
   ``maxtasksperchild``) or are killed by a signal are replaced as before; a ThreadPool is not
   watched.

2. The cause. ``multiprocessing.pool.worker`` (a Process target, pickled by reference under
   spawn) is replaced by a function of the same module and name that records an exception
   escaping the initializer, or the worker (a task it cannot unpickle), for the parent.

3. Unpicklable results. In a worker, ``MaybeEncodingError`` keeps only ``repr()`` of the
   pickling error; its ``__init__`` also copies the mpcompat notes of that error (the path to
   the part that cannot be pickled, added by ``multiprocessing.pickling_notes``), and on
   Python 3.8-3.10 its ``__str__`` shows them.

Nothing runs per task: the wrapped ``_maintain_pool`` runs when the worker-handler thread wakes
up, as the original does, and adds a thread-local look-up unless a worker exited.
"""
import functools
import sys
import threading

from mpcompat.patching.table import Skip

__all__ = ["MIN_FAILURES", "apply", "revert"]

_MARK = "_mpcompat_pool_workers"
MIN_FAILURES = 3  # a pool breaks after max(MIN_FAILURES, processes) failed workers in a row
_local = threading.local()  # .watch: the _Watch of the pool whose worker handler this is


# --- the child side: the worker records why it failed ------------------------------------------

def _record(exc, what):
    try:
        from mpcompat.workers import child_failures
        child_failures.record(exc, what=what)
    except Exception:
        pass


def _receiving(tb):
    """Whether the traceback went through taking a task off the Pool's queue."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("get", "recv", "recv_bytes") and \
                frame.f_globals.get("__name__") in ("multiprocessing.queues",
                                                    "multiprocessing.connection"):
            return True
        tb = tb.tb_next
    return False


def _wrap_worker(original):
    @functools.wraps(original)
    def worker(inqueue, outqueue, initializer=None, initargs=(), maxtasks=None,
               wrap_exception=False):
        if not hasattr(inqueue, "_reader"):  # a ThreadPool's thread: nothing to tell
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        stage = [None]
        if initializer is not None:
            user_initializer = initializer

            def initializer(*args):
                stage[0] = "running the Pool's initializer %s()" % (
                    getattr(user_initializer, "__qualname__", None) or repr(user_initializer))
                user_initializer(*args)
                stage[0] = None
        try:
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) or (
                    isinstance(exc, SystemExit) and exc.code in (None, 0)):
                raise
            what = stage[0]
            if what is None and _receiving(exc.__traceback__):
                what = "unpickling a task its parent sent"
                try:
                    from mpcompat.diagnose import main_guard
                    main_guard.note_missing_attribute(exc)
                except Exception:
                    pass
            _record(exc, what or "running as a Pool worker")
            raise
    setattr(worker, _MARK, True)
    return worker


def _wrap_encoding_init(original):
    @functools.wraps(original)
    def __init__(self, exc, value):
        original(self, exc, value)
        try:
            _keep_notes(self, exc)
        except Exception:
            pass
    setattr(__init__, _MARK, True)
    return __init__


def _keep_notes(error, exc):
    """Give the MaybeEncodingError ``error`` the mpcompat notes of the pickling error ``exc``."""
    if not isinstance(exc, BaseException):
        return  # unpickling in the parent: the notes come with the instance's state
    from mpcompat.diagnose.notes import add_note, notes_of
    found = notes_of(exc)
    if not found:
        return
    if sys.version_info < (3, 11):
        # add_note appended the notes to exc's message: keep the message alone in repr().
        args = exc.args
        if len(args) == 1 and isinstance(args[0], str):
            message = args[0]
            for text in reversed(found):
                if message.endswith("\n" + text):
                    message = message[:-len(text) - 1]
            error.exc = "%s(%r)" % (type(exc).__name__, message)
            error.args = (error.exc, error.value)
    for text in found:
        add_note(error, text)


def _wrap_encoding_str(original):
    @functools.wraps(original)
    def __str__(self):
        text = original(self)
        notes = [n for n in (self.__dict__.get("__notes__") or ())
                 if isinstance(n, str) and n.startswith("mpcompat: ")]
        return "\n".join([text] + notes)
    setattr(__str__, _MARK, True)
    return __str__


# --- the parent side: the worker handler watches its pool -----------------------------------------

class _StandIn(object):
    """Takes the place of the workers of a broken pool in ``Pool._pool``.

    The pool's threads and ``terminate()`` see a worker that is alive until terminated; its
    ``sentinel`` (the task queue's reader) wakes the worker handler whenever a task arrives,
    and the worker handler then fails it.
    """

    pid = None
    daemon = True
    name = "mpcompat-BrokenPool"

    def __init__(self, inqueue, cls):
        self.sentinel = inqueue._reader
        self._alive = True
        self._cls = cls

    @property
    def exitcode(self):
        """None (``_join_exited_workers`` leaves it in place) while the patch is applied;
        once reverted, 0: the original code takes it out and starts workers again."""
        maintain = self._cls.__dict__.get("_maintain_pool")
        return None if getattr(getattr(maintain, "__func__", None), _MARK, False) else 0

    def is_alive(self):
        """True until the pool terminates it."""
        return self._alive

    def terminate(self):
        """Nothing runs: just stop being alive."""
        self._alive = False

    kill = terminate

    def join(self, timeout=None):
        """Nothing to wait for."""

    def close(self):
        """Nothing to release."""

    def __repr__(self):
        return "<%s standing in for the workers of a broken Pool>" % type(self).__name__


def _task_ids(data):
    """``(job, i)`` of a pickled Pool task, read without unpickling it; None otherwise."""
    import pickletools
    values = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("PROTO", "FRAME", "MARK"):
                continue
            if op.name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG") \
                    and isinstance(arg, int):
                values.append(arg)
                if len(values) == 2:
                    return tuple(values)
                continue
            return None
    except Exception:
        return None
    return None


def _progress(cache):
    """What the pending results of a pool have received so far: ``{job: count}``."""
    for _ in range(3):
        try:
            items = list(cache.items())
            break
        except RuntimeError:  # changed size while being copied: try again
            continue
    else:
        return None
    return {job: (getattr(result, "_number_left", None), getattr(result, "_index", None))
            for job, result in items}


class _Watch(object):
    """What the worker handler of one process pool knows about its workers' failures."""

    def __init__(self, cls, cache, pool):
        self.cls, self.cache, self.pool = cls, cache, pool
        self.join_exited = cls._join_exited_workers
        self.failed = []       # (pid, exitcode) of workers that failed, in a row
        self.seen = None       # _progress() when the last failure was counted
        self.total = 0         # failed workers since the pool started
        self.born = {w: 0 for w in pool}  # live worker -> self.total when it was started
        self.message = None    # set once the pool is broken, with the note and pids
        self.note = None
        self.pids = self.exitcodes = ()

    # Called with the arguments of Pool._maintain_pool, in the worker-handler thread, once
    # self.join_exited (Pool._join_exited_workers) found workers that exited, or when broken.
    def maintain(self, args):
        pool = args[3]
        if self.message is not None:
            self._reap(pool)
            self._drain(args[4])
            return
        try:
            if self._exited([w for w in list(self.born) if w not in pool], pool, args[2]):
                self._break(pool, args[4])
                return
        except Exception:
            _local.watch = None  # a bug of ours must not stop the pool: stop watching it
        self.cls._repopulate_pool_static(*args)
        for w in pool:
            if w not in self.born:
                self.born[w] = self.total

    def _exited(self, workers, pool, processes):
        """Count the failures among ``workers``, which exited; return whether to break.

        The pool breaks after ``max(MIN_FAILURES, processes)`` failures in a row with no
        result received in between, unless a worker alive now has outlived ``processes``
        failures of others (it started well: the pool works, with fewer workers).
        """
        now = _progress(self.cache)
        if now is None or (self.seen is not None and self._advanced(self.seen, now)):
            self._forget()
        self.seen = now
        for w in workers:
            self.born.pop(w, None)
            code = w.exitcode
            if code == 0:
                self._forget()  # it exited at maxtasksperchild: the pool does work
            elif isinstance(code, int) and code > 0:
                self.failed.append((w.pid, code))
                self.total += 1
            # code < 0: killed by a signal (OOM, kill -9): not its own failure, replaced
        if len(self.failed) < max(MIN_FAILURES, processes):
            return False
        return not any(self.total - self.born.get(w, self.total) >= processes for w in pool)

    @staticmethod
    def _advanced(before, now):
        return any(job not in now or now[job] != state for job, state in before.items())

    def _forget(self):
        if self.failed:
            from mpcompat.workers import child_failures
            for pid, _ in self.failed:
                child_failures.take(pid)  # deletes the record
        self.failed = []

    def _break(self, pool, inqueue):
        from mpcompat.workers import child_failures
        self.pids = [pid for pid, _ in self.failed]
        self.exitcodes = [code for _, code in self.failed]
        self.message = _message(self.pids, self.exitcodes)
        self.note = child_failures.note_for(self.pids, "Pool worker") or _fallback_note()
        self.failed = []
        pool.append(_StandIn(inqueue, self.cls))
        for job, result in list(self.cache.items()):
            self._fail_pending(job, result)
        self._drain(inqueue)

    def error(self):
        """A new BrokenPool for one result (each raise gets its own traceback)."""
        from mpcompat.diagnose.notes import add_note
        from mpcompat.errors import BrokenPool  # also mpcompat.BrokenPool; loaded when needed
        exc = BrokenPool(self.message, self.pids, self.exitcodes)
        add_note(exc, self.note)
        return exc

    def _fail_pending(self, job, result):
        try:
            if hasattr(result, "_number_left"):  # MapResult: fail its remaining chunks
                while result._number_left > 0 and self.cache.get(job) is result:
                    result._set(0, (False, self.error()))
            elif hasattr(result, "_items"):  # IMapIterator: the item waited for next
                result._set(result._index, (False, self.error()))
            else:
                result._set(0, (False, self.error()))
        except Exception:
            pass  # a callback that raised: the result is set all the same

    def _reap(self, pool):
        """Join the workers that still exit after the pool broke (they are not replaced)."""
        before = pool[:]
        if self.cls._join_exited_workers(pool):
            from mpcompat.workers import child_failures
            for w in before:
                if w not in pool and w.pid is not None:
                    child_failures.take(w.pid)

    def _drain(self, inqueue):
        """Fail the tasks waiting in the pool's task queue."""
        lock = inqueue._rlock
        if not lock.acquire(True, 0.1):  # terminate() holds it: the pool is going away
            return
        try:
            reader = inqueue._reader
            while reader.poll():
                ids = _task_ids(reader.recv_bytes())
                if ids is None:
                    continue  # the sentinel None that tells workers to exit
                result = self.cache.get(ids[0])
                if result is not None:
                    try:
                        result._set(ids[1], (False, self.error()))
                    except Exception:
                        pass
        except (OSError, EOFError):
            pass
        finally:
            lock.release()


def _message(pids, exitcodes):
    codes = sorted(set(exitcodes))
    shown = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    return ("%d worker processes of this Pool exited with an error in a row (exit code%s %s), "
            "with no task done in between (pids %s). The Pool starts no new workers, and its "
            "pending and new tasks fail with this error." % (
                len(pids), "s" if len(codes) > 1 else "", ", ".join(map(str, codes)), shown))


def _fallback_note():
    return ("mpcompat: the workers left no record of their error (is mpcompat active in "
            "them?); each printed it on its standard error, above.")


def _wrap_handle_workers(original):
    func = original.__func__

    @functools.wraps(func)
    def _handle_workers(cls, *args, **kwargs):
        # args: cache, taskqueue, ctx, Process, processes, pool, inqueue, outqueue, ...
        if len(args) >= 7 and not kwargs and hasattr(args[6], "_reader") and \
                hasattr(args[6], "_rlock"):
            _local.watch = _Watch(cls, args[0], args[5])
        return func(cls, *args, **kwargs)
    setattr(_handle_workers, _MARK, True)
    _handle_workers._mpcompat_original = original
    return classmethod(_handle_workers)


def _wrap_maintain(original):
    func = original.__func__

    @functools.wraps(func)
    def _maintain_pool(ctx, Process, processes, pool, inqueue, outqueue, initializer,
                       initargs, maxtasksperchild, wrap_exception):
        watch = getattr(_local, "watch", None)
        if watch is None or watch.pool is not pool:
            return func(ctx, Process, processes, pool, inqueue, outqueue, initializer,
                        initargs, maxtasksperchild, wrap_exception)
        if watch.message is None and not watch.join_exited(pool):
            return  # no worker exited: the usual case, as cheap as the original
        watch.maintain((ctx, Process, processes, pool, inqueue, outqueue, initializer,
                        initargs, maxtasksperchild, wrap_exception))
    setattr(_maintain_pool, _MARK, True)
    _maintain_pool._mpcompat_original = original
    return staticmethod(_maintain_pool)


# --- apply / revert ----------------------------------------------------------------------------

def _descriptor(cls, name, kind):
    value = cls.__dict__.get(name) if isinstance(cls, type) else None
    return value if isinstance(value, kind) else None


def apply(module):
    """Hook ``worker``, ``Pool._handle_workers``, ``Pool._maintain_pool`` and
    ``MaybeEncodingError`` of ``module`` (``multiprocessing.pool``)."""
    pool_cls = module.__dict__.get("Pool")
    worker = module.__dict__.get("worker")
    encoding = module.__dict__.get("MaybeEncodingError")
    handle = _descriptor(pool_cls, "_handle_workers", classmethod)
    maintain = _descriptor(pool_cls, "_maintain_pool", staticmethod)
    if not callable(worker) or handle is None or maintain is None or not all(
            _descriptor(pool_cls, name, staticmethod) for name in (
                "_join_exited_workers", "_repopulate_pool_static")) or \
            not isinstance(encoding, type) or "__init__" not in encoding.__dict__:
        raise Skip("multiprocessing.pool lacks the worker, Pool or MaybeEncodingError parts "
                   "this patch hooks")
    if not getattr(worker, _MARK, False):
        module.worker = _wrap_worker(worker)
    if not getattr(handle.__func__, _MARK, False):
        pool_cls._handle_workers = _wrap_handle_workers(handle)
    if not getattr(maintain.__func__, _MARK, False):
        pool_cls._maintain_pool = _wrap_maintain(maintain)
    init = encoding.__dict__["__init__"]
    if not getattr(init, _MARK, False):
        encoding.__init__ = _wrap_encoding_init(init)
    if sys.version_info < (3, 11):
        text = encoding.__dict__.get("__str__")
        if callable(text) and not getattr(text, _MARK, False):
            encoding.__str__ = _wrap_encoding_str(text)


def revert(module):
    """Put back the original functions where ours are still in place."""
    worker = module.__dict__.get("worker")
    if getattr(worker, _MARK, False):
        module.worker = worker.__wrapped__
    pool_cls = module.__dict__.get("Pool")
    for name, kind in (("_handle_workers", classmethod), ("_maintain_pool", staticmethod)):
        value = _descriptor(pool_cls, name, kind)
        if value is not None and getattr(value.__func__, _MARK, False):
            setattr(pool_cls, name, value.__func__._mpcompat_original)
    encoding = module.__dict__.get("MaybeEncodingError")
    if isinstance(encoding, type):
        for name in ("__init__", "__str__"):
            value = encoding.__dict__.get(name)
            if getattr(value, _MARK, False):
                setattr(encoding, name, value.__wrapped__)
