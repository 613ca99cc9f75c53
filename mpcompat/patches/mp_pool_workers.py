"""Patch ``multiprocessing.pool_workers``: a Pool never loses a task and never hangs because a
worker died, never respawns dying workers forever, and names what it cannot send back
(patches.md).

Each worker has a private channel and the parent dispatches the tasks, to workers that said
they are ready (:mod:`mpcompat.workers.pool_channels`). A worker reaped with tasks outstanding:
the oldest it read fails with :class:`WorkerLostError`, the others go to other workers.
Workers that die before they are ready for tasks, ``max(MIN_FAILURES, processes)`` in a row
for ``GRACE`` seconds, break the pool (:class:`BrokenPool`). A task or result that cannot be
unpickled fails as that task's result; ``MaybeEncodingError`` keeps its notes. A ThreadPool is
not touched.

The fork rule: the Pool's handler threads import nothing for the first time (a fork child made
meanwhile would inherit the import lock held): every module they need is imported here, or as
the Pool is made (:func:`_parent_side`).
"""
import functools
import io
import os
import pickle
import sys
import time
import types
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler

from mpcompat.patching.spec import Skip
from mpcompat.patching.patcher import Patcher
from mpcompat.child_failures import channel
from mpcompat.workers import pool_channels, pool_task
from mpcompat.workers.user_frames import (explained, format_trimmed, innermost_user_frame,
                                          without_own_frames)

__all__ = ["GRACE", "MIN_FAILURES", "apply", "revert"]

GRACE = 3.0       # seconds of nothing but start-up failures before a pool breaks
MIN_FAILURES = 3  # and at least max(MIN_FAILURES, processes) of them in a row
_KEPT_ERRORS = 1000  # BrokenPool errors of a pool kept to learn whether one was raised
DOOMED_WAIT = 1.0  # seconds a pool broken at once lets its last workers fail by themselves
TASK_STAGE, WAITING = "running a task", "waiting for a task"
FDS_PER_WORKER = 3  # the standard library's two (a Process's sentinel and pipe end), a channel
# What the patch replaces on Pool, and how Pool binds it (None: a plain method).
_HOOKED = {"_setup_queues": None, "_repopulate_pool": None,
           "_repopulate_pool_static": staticmethod,
           "_maintain_pool": staticmethod, "_terminate_pool": classmethod,
           "_check_running": None, "_map_async": None}

patcher = Patcher()
notes = errors = exits = None  # the parent's side: set by _parent_side() (the fork rule)


# --- the worker's side ----------------------------------------------------------------------

class _Tasks(object):
    """A worker's end of its channel, as its task and result queue: it says it is ready at the
    first ``get``; a task it cannot unpickle fails as that task's result. ``what``: the step the
    worker is at, for its failure record."""

    def __init__(self, conn):
        self.conn, self.what, self.asked = conn, "starting", False

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
            self.conn.send_bytes(pool_channels.READY)
        while True:
            data = self.conn.recv_bytes()
            try:
                task = ForkingPickler.loads(data)
            except Exception as exc:
                self._unreadable(exc)
                continue
            if task is not None:
                self.what, pool_task.current.func = TASK_STAGE, task[2]
            return task

    def leaving(self):
        """This worker ends of an exception no task raised (Ctrl-C): waiting for a task, it
        started none of those sent to it; the parent gives them to other workers."""
        if self.what == WAITING:
            try:
                self.conn.send_bytes(pool_channels.IDLE)
            except Exception:
                pass

    def put(self, obj):
        """Send a result (the parent knows which task it answers). A parent that closed the
        channel has settled the task already: the next ``get`` ends the worker, quietly."""
        try:
            self.conn.send(obj)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _unreadable(self, exc):
        from mpcompat.diagnose.notes import note_missing_attribute
        self.what = "unpickling a task its parent sent"
        note_missing_attribute(exc)
        try:
            self.conn.send((None, None, (False, exc)))
        except Exception:
            raise exc


def _make_worker(original):
    """``multiprocessing.pool.worker``, under the same name (a Process target, pickled by
    reference)."""

    @functools.wraps(original)
    def worker(inqueue, outqueue, initializer=None, initargs=(), maxtasks=None,
               wrap_exception=False):
        conn = getattr(inqueue, "conn", None)
        if type(inqueue) is not types.SimpleNamespace or conn is None:  # not a channel: threads
            return original(inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception)
        pool_channels.close_inherited()
        tasks = _Tasks(conn)
        conn.send_bytes(pool_channels.STARTED)
        if initializer is not None:
            initializer = tasks.initializing(initializer)
        try:
            return original(tasks, tasks, initializer, initargs, maxtasks, wrap_exception)
        except Exception as exc:
            failed = exc
        except BaseException as exc:
            tasks.leaving()
            if isinstance(exc, SystemExit):
                channel.record(exc, what=tasks.what)
                raise
            failed = exc  # Ctrl-C: printed as Process._bootstrap prints it, but our frames
        _worker_failed(failed, tasks)
    return worker


def _worker_failed(exc, tasks):
    """``exc`` ends this worker: record it for the parent, and exit with code 1. A start-up
    failure the parent has is told by the parent, once for the workers that fail alike
    (:func:`_say_start_failure`); any other error prints its traceback, without mpcompat's
    frames."""
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


# --- the parent's side ------------------------------------------------------------------------

def _parent_side():
    """Import what the Pool's handler threads need below: called as a Pool is made, in the
    user's thread, before its threads start (the fork rule); not when the patch applies,
    since every spawn worker applies it as it starts, and needs none of it (the exit evidence
    is loaded already where the ``failure_records`` patch is on and this is no spawn child).
    The functions below use these modules through the globals it sets."""
    global notes, errors, exits
    from mpcompat.diagnose import notes
    from mpcompat import errors
    from mpcompat.child_failures import exits


def _gated(fork, initializer):
    """The dispatcher's ``gated`` (``fork``: the Pool's start method is fork): whether tasks wait
    for a worker that said it is ready. A fork worker is ready a moment after it starts, unless an
    initializer runs: waiting for its word would only add a round trip per worker (one per task
    with maxtasksperchild=1). A spawn or forkserver worker takes tens of milliseconds: gated where
    mpcompat starts with every interpreter (installed); where the parent only imported it, the
    workers may never speak (None: decided by the first word, or its absence)."""
    if fork:
        return initializer is not None
    boot = sys.modules.get("_mpcompat_bootstrap")
    return None if getattr(boot, "outcome", None) == "activated" else False


class _StartFailure(object):
    """A worker that died while starting: ``pid``, ``exitcode``, ``record`` (the
    ``FailureRecord`` it sent, or None)."""

    __slots__ = ("pid", "exitcode", "record")

    def __init__(self, process, record):
        self.pid, self.exitcode, self.record = process.pid, process.exitcode, record


class _Starts(object):
    """A pool's workers that failed while starting, in a row: ``failures`` (each a
    :class:`_StartFailure`), ``since`` (time, tasks answered) at the first of them; ``said``:
    the last failure told on stderr (:func:`_say_start_failure`)."""

    def __init__(self):
        self.failures, self.since, self.said = [], None, None

    def count(self, dispatcher, process, record, starting):
        """Worker ``process`` died, while ``starting`` or not."""
        if not starting:
            self.failures, self.since = [], None
            return
        if self.since is None or self.since[1] != dispatcher.answered:
            self.failures, self.since = [], (time.monotonic(), dispatcher.answered)
        self.failures.append(_StartFailure(process, record))


def _should_break(starts, processes, dispatcher):
    """The rule (patches.md): no task answered since the first of the start-up failures in a
    row, no live worker ready, and either the last one's error fails every new worker alike (the
    main-guard error, a name missing in the main module), or there were at least
    ``max(MIN_FAILURES, processes)`` of them over at least GRACE seconds."""
    if not starts.failures or starts.since[1] != dispatcher.answered or \
            any(w.ready for w in list(dispatcher.workers.values())):
        return False
    record = starts.failures[-1].record
    return (record is not None and notes.cannot_pass(record)) or (
        len(starts.failures) >= max(MIN_FAILURES, processes)
        and time.monotonic() - starts.since[0] >= GRACE)


def _reaped(dispatcher, starts, process, processes):
    """Worker ``process`` exited and was joined (in the worker handler): settle its tasks,
    count it if it died while starting, break the pool by the rule."""
    w = dispatcher.reaped(process)
    if w is None:
        return
    record = channel.take(process.pid) if process.exitcode else None
    # Started but not ready: it died before its first task (in its initializer). Neither: it
    # ran without mpcompat, or died before it could say anything; its record may tell.
    starting = not w.ready and (w.started or (
        record is not None and record.what != TASK_STAGE))
    dispatcher.resolve(w, None if starting else functools.partial(_lost, process, record,
                                                                   w.ready))
    starts.count(dispatcher, process, record, starting)
    at_once = starting and record is not None and notes.cannot_pass(record)
    if starting and not at_once:
        _say_start_failure(starts, process, record)
    if dispatcher.broken is None and _should_break(starts, processes, dispatcher):
        error = _broken(starts.failures, time.monotonic() - starts.since[0])
        if at_once:
            error.untold, error.at_once = _untold_line(process, record), True
        dispatcher.break_(error)
        starts.failures = []


def _say_start_failure(starts, process, record):
    """A start-up failure on one line of the parent's stderr as it happens, unless the last one
    told failed alike: a Pool nobody waits on never fails in silence, and workers that fail
    alike print nothing. (A start-up error every worker would fail with breaks the Pool at
    once: the BrokenPool its waits raise names it, or, if none did, one line as the Pool ends:
    :func:`_say_untold`.) ``os.write``: no lock taken in the worker handler (the fork rule)."""
    if record is not None:
        cause = "failed while starting: %s%s" % (
            record.headline(), " (while %s)" % record.what if record.what else "")
    else:
        cause = "died while starting (%s)" % exits.describe_exit(process.exitcode, process.pid)
    if cause == starts.said:
        return
    starts.said = cause
    line = "%sPool worker process %d %s; the Pool starts another, and its waits report the " \
        "workers that fail alike\n" % (notes.PREFIX, process.pid, cause)
    try:
        os.write(2, line.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _untold_line(process, record):
    """The line that names the error of a Pool broken at once (:func:`_say_untold`)."""
    cause = notes.cause_of(record.notes[0]) if record.notes else None
    cause = " (%s)" % cause if cause else (" (while %s)" % record.what if record.what else "")
    return "%sPool worker process %d failed while starting: %s%s; the Pool broke at once (no " \
        "new worker could start), and nothing raised its BrokenPool\n" % (
            notes.PREFIX, process.pid, record.headline(), cause)


def _say_untold(dispatcher):
    """The Pool ends (terminated, left, collected, or at exit): if it broke at once on an error
    every new worker would fail with and nothing raised its BrokenPool (nobody waited on it),
    say that error on one line, so that it never fails in silence; its workers printed
    nothing. ``os.write``: this may run in any thread (a finalizer)."""
    error = dispatcher.broken
    line = getattr(error, "untold", None)
    if not line or any(_raised(exc) for exc in list(error.made)):
        return
    error.untold = None
    try:
        os.write(2, line.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _let_doomed_end(pool):
    """A pool broken at once terminates: its workers still starting fail as the first did, in
    a moment. Wait for them (``DOOMED_WAIT`` at most) rather than kill them half-way through
    (the objects they made would be left to the resource tracker, which warns of them)."""
    deadline = time.monotonic() + DOOMED_WAIT
    try:
        pending = [w.sentinel for w in list(pool) if w.exitcode is None]
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready = wait(pending, left)
            pending = [s for s in pending if s not in ready]
    except (OSError, ValueError):  # a process closed, a sentinel closed meanwhile
        pass


def _raised(exc):
    """Whether ``exc`` was raised where the user could see it: not only inside the Pool's
    task handler, which catches what ``put`` raises and sets it on the task's result."""
    tb = exc.__traceback__
    return tb is not None and not (tb.tb_frame.f_code.co_name == "_handle_tasks" and
                                   tb.tb_frame.f_globals.get("__name__") == "multiprocessing.pool")


def _lost(process, record, ready):
    # The consequence in the message, the evidence in the note: one form, with or without it.
    exc = errors.WorkerLostError(
        "the Pool worker process %d died %s (%s). The task's result is lost; the Pool goes on "
        "with a new worker." % (process.pid, "while running this task" if ready else
                                "before it said it was ready for tasks, holding this task",
                                exits.describe_exit(process.exitcode, process.pid)),
        process.pid, process.exitcode)
    lines = exits.dead_lines(process.exitcode, record, "The worker's own error: ", process.pid)
    if lines:
        notes.add_note(exc, notes.PREFIX + "\n".join(lines))
    return exc


def _broken(failures, seconds):
    """The function that makes the BrokenPool of each task of a broken pool."""
    pids, codes = [f.pid for f in failures], [f.exitcode for f in failures]
    records = [f.record for f in failures]
    shown = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    ends = ", ".join(sorted(set(map(exits.describe_exit, codes, pids))))
    if len(pids) == 1:  # broken at once: an error every new worker would fail with (below)
        message = ("a worker process of this Pool failed while starting (pid %d, %s), with an "
                   "error every new worker would fail with. The Pool starts no new workers, "
                   "and its pending and new tasks fail with this error." % (pids[0], ends))
    else:
        message = ("%d worker processes of this Pool failed while starting, in a row for %.1f "
                   "s (%s), and none took a task (pids %s). The Pool starts no new workers, and "
                   "its pending and new tasks fail with this error." % (
                       len(pids), seconds, ends, shown))
    records = [r for r in records if r is not None]
    note = channel.describe_records(records, "Pool worker process", tally=len(pids) > 1) \
        if records \
        else notes.PREFIX + ("None of them recorded an error: they died without raising "
                             "(os._exit(), a signal) before the Pool's initializer returned.")

    def error():
        exc = errors.BrokenPool(message, pids, codes)
        notes.add_note(exc, note)
        explained(exc)  # raised by _check_running, its note tells all: no frame of ours shown
        if len(error.made) < _KEPT_ERRORS:
            error.made.append(exc)
        return exc
    # the errors made; the line _say_untold says; broken at once (_let_doomed_end)
    error.made, error.untold, error.at_once = [], None, False
    return error


def _unreadable(data, exc):
    """``exc``, raised unpickling the result ``data``, with a note naming its classes."""
    names = ", ".join(_classes(data)) or "its contents"
    notes.add_note(exc, notes.PREFIX + (
        "the result of this task could not be rebuilt in this process: unpickling %s raised "
        "%s: %s. An exception class whose __init__ takes other arguments than its message "
        "must pass them all to Exception.__init__ (super().__init__(a, b)) or define "
        "__reduce__, so that pickle can rebuild it." % (names, type(exc).__name__, exc)))
    return exc


def _classes(data):
    """The classes a pickle names, but multiprocessing's own: ``["__main__.WeirdError"]``."""
    reader = _ClassNames(io.BytesIO(data))
    try:
        reader.load()
    except Exception:
        pass
    return [n for n in dict.fromkeys(reader.names) if not n.startswith(("multiprocessing.",
                                                                        "builtins."))]


class _ClassNames(pickle.Unpickler):
    """Reads a pickle through, noting the classes and functions it names, and calling none of
    them (each is :class:`_Inert`)."""

    def __init__(self, file):
        super(_ClassNames, self).__init__(file)
        self.names = []

    def find_class(self, module, name):
        self.names.append("%s.%s" % (module, name))
        return _Inert


class _Inert(object):
    """Stands for every class and function a :class:`_ClassNames` meets: takes any arguments,
    state, items."""

    def __init__(self, *args, **kwargs):
        pass

    def _take(self, *args):
        pass

    __setstate__ = __setitem__ = append = extend = add = _take


def _descriptors_short(processes):
    """``(needed, limit)`` when giving ``processes`` workers a channel each would take this
    process past its limit of open file descriptors (``ulimit -n``), else None."""
    import resource
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    needed = FDS_PER_WORKER * processes
    if limit == resource.RLIM_INFINITY or needed < limit // 4:
        return None
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            needed += len(os.listdir(listing)) + 16  # and a few the Pool opens for itself
            break
        except OSError:
            pass
    return (needed, limit) if needed > limit else None


def _leave_to_stdlib(pool, dispatcher, short):
    """``pool`` runs as the standard library's (it needs fewer file descriptors), and says why,
    once."""
    dispatcher.detach(pool._outqueue)
    pool._quick_put, pool._quick_get = pool._inqueue._writer.send, pool._outqueue._reader.recv
    errors.warn(
        "Pool(%d) would need about %d open file descriptors with mpcompat's worker channels "
        "(%d per worker; the standard library's Pool takes %d), over this process's limit "
        "of %d (ulimit -n). It runs as the standard library's Pool: without mpcompat's "
        "guarantees that a worker's death fails its task and that workers failing while "
        "they start break the Pool. Raise the limit (ulimit -n %d) to keep them." % (
            pool._processes, short[0], FDS_PER_WORKER, FDS_PER_WORKER - 1, short[1],
            2 * short[0]), key="pool-descriptors")


# --- the hooks ----------------------------------------------------------------------------------

def _hooks(original, module):
    """The unbound replacements of the ``Pool`` methods of ``_HOOKED`` (``original``: name ->
    the original function; ``module``: ``multiprocessing.pool``)."""

    def _setup_queues(self):
        original["_setup_queues"](self)
        # A process pool's pipe (not a ThreadPool's queue, nor a test's mock context's)
        if isinstance(getattr(self._outqueue, "_reader", None), Connection):
            dispatcher = pool_channels.Dispatcher(self._outqueue, _unreadable)
            dispatcher.starts = _Starts()
            self._quick_put, self._quick_get = dispatcher.put, dispatcher.get

    def _repopulate_pool(self):
        dispatcher = pool_channels.dispatcher_of(getattr(self, "_outqueue", None))
        if dispatcher is None or dispatcher.workers:
            return original["_repopulate_pool"](self)
        # As the Pool is made, before its threads start. Under fork, the imports come before
        # the workers (a page the parent writes after a fork is copied); else after their
        # starts, while they boot.
        fork = self._ctx.get_start_method() == "fork"
        dispatcher.gated = _gated(fork, self._initializer)
        short = _descriptors_short(self._processes)
        early = fork or short
        if early:
            _parent_side()
        if short:
            _leave_to_stdlib(self, dispatcher, short)
        try:
            return original["_repopulate_pool"](self)
        finally:
            if not early:
                _parent_side()

    def _repopulate_pool_static(ctx, Process, processes, pool, inqueue, outqueue, initializer,
                                initargs, maxtasksperchild, wrap_exception):
        dispatcher = pool_channels.dispatcher_of(outqueue)
        if dispatcher is None:
            return original["_repopulate_pool_static"](
                ctx, Process, processes, pool, inqueue, outqueue, initializer, initargs,
                maxtasksperchild, wrap_exception)
        # Loaded at the first call, in the user's thread (the fork rule); not with the patch, as
        # a spawn worker applies it and starts no worker.
        from mpcompat.child_failures import memory_evidence
        dispatcher.maxtasks = maxtasksperchild
        with memory_evidence.batch():  # the OOM counters read once for the workers started
            for _ in range(processes - len(pool)):
                if dispatcher.broken is not None:
                    # No new worker, and no fork while the user's threads go on (a fork copies
                    # their locks).
                    break
                sock, worker_end = dispatcher.channel()
                try:
                    w = Process(ctx, target=module.worker, args=(
                        worker_end, worker_end, initializer, initargs, maxtasksperchild,
                        wrap_exception))
                    w.name = w.name.replace("Process", "PoolWorker")
                    w.daemon = True
                    w.start()
                except BaseException:
                    dispatcher.discard(sock)
                    raise
                finally:
                    worker_end.conn.close()
                pool.append(w)
                dispatcher.add(w, sock)
        dispatcher.wake_up()
        return None

    def _maintain_pool(ctx, Process, processes, pool, inqueue, outqueue, *args):
        dispatcher = pool_channels.dispatcher_of(outqueue)
        if dispatcher is None:
            return original["_maintain_pool"](ctx, Process, processes, pool, inqueue, outqueue,
                                              *args)
        starts = dispatcher.starts
        if starts.failures and any(w.exitcode is not None for w in list(pool)):
            # No flood of workers that fail the same way: wait longer after each failure.
            time.sleep(min(0.05 * len(starts.failures), 0.5))
        before = list(pool)
        if module.Pool._join_exited_workers(pool):
            for process in before:
                if process not in pool:
                    _reaped(dispatcher, starts, process, processes)
            module.Pool._repopulate_pool_static(ctx, Process, processes, pool, inqueue,
                                                outqueue, *args)
        return None

    def _terminate_pool(cls, taskqueue, inqueue, outqueue, pool, *args, **kwargs):
        dispatcher = pool_channels.dispatcher_of(outqueue)
        if dispatcher is not None:
            dispatcher.terminate()
            if getattr(dispatcher.broken, "at_once", False):
                _let_doomed_end(pool)
        try:
            return original["_terminate_pool"](cls, taskqueue, inqueue, outqueue, pool, *args,
                                               **kwargs)
        finally:
            if dispatcher is not None:
                dispatcher.close()
                # workers that died unreaped: nobody will ask why
                channel.discard([w.pid for w in list(pool) if w.pid])
                if dispatcher.broken is not None:
                    _say_untold(dispatcher)

    def _check_running(self):
        original["_check_running"](self)
        dispatcher = pool_channels.dispatcher_of(getattr(self, "_outqueue", None))
        if dispatcher is not None and dispatcher.broken is not None:
            raise dispatcher.broken()

    def _map_async(self, func, iterable, *args, **kwargs):
        if not hasattr(iterable, "__len__"):
            iterable = list(iterable)  # as the original does: a retry must see it whole
        while True:
            try:
                return original["_map_async"](self, func, iterable, *args, **kwargs)
            except ZeroDivisionError:  # no worker to size chunks by, at this instant:
                _check_running(self)   # broken since the check, or all died and are being
                if self._pool:         # replaced (the worker handler adds or breaks)
                    raise
                time.sleep(0.01)

    return {hook.__name__: hook for hook in (
        _setup_queues, _repopulate_pool, _repopulate_pool_static, _maintain_pool, _terminate_pool,
        _check_running, _map_async)}


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
        raise Skip("a Pool's worker channels need Unix sockets")
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
    for name, hook in _hooks(original, module).items():
        hook = without_own_frames(functools.wraps(original[name])(hook))
        patcher.replace(Pool, name, _HOOKED[name](hook) if _HOOKED[name] else hook)
    patcher.replace(encoding, "__init__", _keeping_notes(patcher.original(encoding, "__init__")))
    if sys.version_info < (3, 11):
        patcher.replace(encoding, "__str__", _showing_notes(patcher.original(encoding,
                                                                             "__str__")))


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
