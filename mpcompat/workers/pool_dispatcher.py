"""The parent's side of a process Pool's worker channels (``mpcompat.patches.mp_pool_workers``
holds the worker's): loaded as the process's first Pool is made, in the user's thread.

The parent knows, per worker, the tasks sent and not answered yet (a worker answers its tasks
in order, once each): a worker reaped with tasks outstanding fails the oldest, the one it was
on, with :class:`WorkerLostError`; the later ones never started and go to other workers. A
worker that answers quickly holds more tasks (about ``BUDGET`` seconds of them), so that it
never waits for the parent between tiny tasks. Workers that die before they are ready for
tasks, ``max(MIN_FAILURES, processes)`` in a row for ``GRACE`` seconds, break the pool
(:class:`BrokenPool`). A task or result that cannot be unpickled fails as that task's result;
``MaybeEncodingError`` keeps its notes. No worker takes a lock shared with another process,
and a worker that dies mid-message spoils nothing but its own channel.

Pay on failure, and the fork rule (the Pool's handler threads import nothing for the first
time: a fork child made meanwhile would inherit the import lock held): as a Pool is made, the
parent loads only what those threads need to word a dead worker (:func:`_parent_side`) and the
sampler of the workers' private memory (:func:`_sampler_module`); the explainer of a task that
cannot be pickled loads where its error is raised, in the user's thread; a worker loads what it
needs as it fails.
"""
import collections
import contextlib
import functools
import io
import os
import pickle
import select
import struct
import sys
import threading
import time
import types
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler

from mpcompat.patches.mp_pool_workers import (IDLE, READY, STARTED, TASK_STAGE, _UNEXPLAINED,
                                              _dispatchers, _loaded)
from mpcompat.workers.user_frames import explained, without_own_frames

__all__ = ["GRACE", "MIN_FAILURES", "Dispatcher", "hooks", "say_memory"]

GRACE = 3.0       # seconds of nothing but start-up failures before a pool breaks
MIN_FAILURES = 3  # and at least max(MIN_FAILURES, processes) of them in a row
_KEPT_ERRORS = 1000  # BrokenPool errors of a pool kept to learn whether one was raised
DOOMED_WAIT = 1.0  # seconds a pool broken at once lets its last workers fail by themselves
FDS_PER_WORKER = 4  # the standard library's two (a Process's sentinel pipe), two pipe ends
# Bytes: put() waits while more than this waits in the parent for room in a worker.
SMALL = 64 * 1024
# A worker holds, beyond the task it runs, tasks of at most ROOM bytes in all (its pipe holds
# them: a write never waits for a worker that may be waiting for the parent to read its
# result), and at most DEEP of them: BUDGET seconds of work at the pace it answered the last.
ROOM, DEEP, BUDGET = 32 * 1024, 16, 0.001
# Seconds after its first worker started during which an undecided Pool (``gated`` None) waits
# for a first STARTED before it sends tasks to any worker (workers without mpcompat never
# speak).
UNHEARD = 2.0
_PREFIX = "mpcompat: "
_PARENT = object()  # in Dispatcher.results: a message of the parent's own threads
_HEADER, _BIG = struct.Struct("!i"), struct.Struct("!Q")  # multiprocessing.connection's framing
_END = pickle.dumps(None)  # "no more tasks"
_CHUNK = 1 << 16  # bytes read from a channel at once
_ATTRIBUTE = "_mpcompat_dispatcher"  # on the Pool's result queue
# CPython's texts of the start-up errors that starting another worker cannot fix.
_CANNOT_PASS = ("finished its bootstrapping phase", "on <module '__main__'",
                "on <module '__mp_main__'", "module '__main__' has no attribute",
                "module '__mp_main__' has no attribute")

errors = exits = notes = None  # set by _parent_side() (the fork rule)


# --- the parent's side: the channels ------------------------------------------------------------

def dispatcher_of(outqueue):
    """The dispatcher of the Pool whose result queue is ``outqueue``, or None."""
    found = getattr(outqueue, _ATTRIBUTE, None)  # a mock answers any name
    return found if isinstance(found, Dispatcher) else None


class _Worker(object):
    """The parent's view of one worker: its ends of the channel (``tasks`` it writes,
    ``results`` it reads without blocking, file descriptor ``fd``), the tasks sent and not
    answered (``(job, index, pickled task)``, oldest first; ``load``: their bytes), what it
    said, what waits to be written; ``unsent``: how many of the newest pending tasks could not
    be written (it had closed its end); ``idle``: it said it died waiting for a task, having
    started none; ``depth``: the tasks it may hold; ``began``: when it began its oldest."""

    def __init__(self, tasks, results):
        self.tasks, self.results, self.fd = tasks, results, results.fileno()
        self.pending, self.outbox = collections.deque(), collections.deque()
        self.buffer = bytearray()
        self.sent = self.unsent = self.load = 0
        self.started = self.ready = self.closing = self.writing = self.eof = self.dead = False
        self.idle, self.depth, self.began = False, 2, 0.0


class Dispatcher(object):
    """A process Pool's side of its workers' channels: ``put`` is its task handler's
    ``Pool._quick_put``, ``get`` its result handler's ``Pool._quick_get``."""

    def __init__(self, outqueue):
        self.reader = outqueue._reader
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)  # put() waits on it for room in the queue
        self.written = threading.Condition(self.lock)  # a thread stopped writing to a worker
        self.workers = {}  # Process -> _Worker, until reaped
        self.ends = set()  # the _Workers whose ends are open
        # the tasks waiting for room in a worker, and their size: the dead workers' that never
        # started come first
        self.queue, self.queued = collections.deque(), 0
        self.results = collections.deque()  # (job, index, outcome or pickled result) for get
        self.todo = []  # workers with something to write and no thread writing it
        self.dead = []  # reaped workers whose ends the result handler closes
        self.maxtasks, self.broken = None, None  # broken: makes the error of every task
        self.ending = self.terminated = self.waiting = False
        self.answered = 0
        # ``gated``: tasks go to ready workers only (the first worker ready takes what waits,
        # as from the standard library's shared pipe); False: to any worker; None: gated once a
        # worker says STARTED, else not after UNHEARD seconds from ``since``, the first
        # worker's start. Set by the Pool as it starts its workers.
        self.since, self.gated = None, False
        self.version = 0  # the set of channels to read changed
        wake = os.pipe()  # wakes the result handler
        os.set_blocking(wake[1], False)
        self.wake = (Connection(wake[0], writable=False), Connection(wake[1], readable=False))
        self._poll, self._polled, self._seen = select.poll(), {}, -1
        self._chunk = bytearray(_CHUNK)  # what channels are read into
        self._view = memoryview(self._chunk)
        self._fds = (wake[0], self.reader.fileno())
        for fd in self._fds:
            self._poll.register(fd, select.POLLIN)
        self.failures, self.failed_since, self.said = [], None, None  # see _reaped()
        self.memory = None  # the sampler of the workers' private memory (_start_sampler)
        _dispatchers.add(self)
        setattr(outqueue, _ATTRIBUTE, self)

    # --- workers come and go (the thread that starts them: the user's or the worker handler)

    def channel(self):
        """A new channel: the parent's _Worker (for :meth:`add` or :meth:`discard`), and the
        worker's ends (Connections) inside what the worker function takes as its task and
        result queues (the standard library's worker uses their ``get`` and ``put``; ``conn``
        tells ``mp_children`` that a Pool worker's start-up error is named by its Pool)."""
        tasks_r, tasks_w = os.pipe()
        results_r, results_w = os.pipe()
        os.set_blocking(results_r, False)
        w = _Worker(Connection(tasks_w, readable=False), Connection(results_r, writable=False))
        with self.lock:
            self.ends.add(w)
        tasks, results = Connection(tasks_r, writable=False), Connection(results_w,
                                                                        readable=False)
        return w, types.SimpleNamespace(get=tasks.recv, put=results.send, conn=tasks,
                                        results=results)

    def add(self, process, w):
        """Worker ``process`` started with channel ``w`` (then :meth:`wake_up`: the result
        handler reads the new channels)."""
        with self.lock:
            self.workers[process] = w
            if self.since is None:
                self.since = time.monotonic()
            self.version += 1
            self._pump()
        if self.todo:
            self._write_out()

    def discard(self, w):
        """Close a channel (its worker did not start, or is gone)."""
        with self.lock:
            self.ends.discard(w)
        w.tasks.close()
        w.results.close()

    def reaped(self, process):
        """Worker ``process`` exited and was joined: keep what its channel holds complete; its
        ends close once nobody writes to them (an orphan then reads EOF). Returns its _Worker,
        or None."""
        with self.lock:
            w = self.workers.pop(process, None)
            if w is None:
                return None
            self._read(w)
            w.dead = True
            if not w.writing:
                self.dead.append(w)
            self.version += 1
        self._write_out()
        self.wake_up()
        return w

    def resolve(self, w, error):
        """Settle the tasks dead worker ``w`` held: the oldest fails with ``error()`` (None: it
        never started), the others go to other workers (or fail, once broken)."""
        with self.lock:
            # A write to it in progress fails as it died: wait for the writer to count it
            # unsent.
            deadline = time.monotonic() + 2.0
            while w.writing and time.monotonic() < deadline:
                self.written.wait(0.1)
            lost = list(w.pending)
            w.pending.clear()
            # How many it read, oldest first: a worker that spoke started none of the tasks it
            # never read; one that never said it was ready fails the oldest (else a pool whose
            # workers die silently would resend it for ever).
            read = 0 if w.idle else len(lost) - w.unsent if w.ready else len(lost)
            if error is not None and read > 0:
                job, index, _ = lost.pop(0)
                self.results.append((job, index, (False, error())))
            self.queue.extendleft(reversed(lost))
            self.queued += sum(len(entry[2]) for entry in lost)
            if self.broken is not None:
                self._fail_all()
            self._pump()
        self._write_out()
        self.wake_up()

    def break_(self, error):
        """Fail every task sent and every task to come with ``error()``."""
        with self.lock:
            self.broken = error
            self._fail_all()
            self.room.notify_all()
        self.wake_up()

    def _fail_all(self):
        for w in self.workers.values():
            self.queue.extend(w.pending)
            w.pending.clear()
        while self.queue:
            job, index, _ = self.queue.popleft()
            self.results.append((job, index, (False, self.broken())))
        self.queued = 0

    def terminate(self):
        """The Pool is terminating: wake a put waiting for room; end the workers a write waits
        for (they are not reading; the Pool terminates them all anyway), so that it ends."""
        self.terminated = True
        with self.lock:
            self.room.notify_all()
            written = [process for process, w in self.workers.items() if w.writing]
        for process in written:
            try:
                process.terminate()
            except Exception:
                pass

    def close(self):
        """Close every channel (the Pool has terminated, or runs without channels)."""
        _dispatchers.discard(self)
        for w in list(self.ends):
            self.discard(w)
        wake, self.wake = self.wake, ()
        for end in wake:
            end.close()

    # --- sending (the task handler's put, and whoever frees room or adds a worker) ----------

    def put(self, task):
        """``Pool._quick_put``: send ``task`` to a worker with room, or queue it, waiting while
        the queue is full (None: the end of the tasks). A task that cannot be pickled raises
        here, before anything."""
        data = None if task is None else _pickled(task)
        with self.lock:
            while data is not None and self.queued > SMALL:
                if self.terminated:
                    return None
                self.waiting = True
                self.room.wait()
            if self.broken is not None and data is not None:
                raise self.broken()
            if data is None:
                self.ending = True
            elif not self.terminated:
                self.queue.append((task[0], task[1], data))
                self.queued += len(data)
            if len(self.queue) <= 1:  # else no worker has room (the queue would be empty)
                self._pump()
            undecided = self.queue and self.gated is None
        if undecided:  # the result handler times the wait for a first STARTED
            self.wake_up()
        if self.todo:
            self._write_out()
        return None

    def _pump(self, workers=None):
        """Send the queued tasks where there is room (in ``workers``, default all): one to
        each idle ready worker first, then more to each worker while it has room (see ROOM);
        after the last task, None to each idle worker."""
        queue = self.queue
        if queue and self.broken is None and not self.terminated:
            for first in (True, False):
                for w in workers or self.workers.values():
                    if w.closing or w.eof or not (w.ready or self.gated is False):
                        continue
                    while queue and self._room(w, len(queue[0][2]), first):
                        entry = queue.popleft()
                        self.queued -= len(entry[2])
                        if not w.pending:
                            w.began = time.monotonic()
                        w.pending.append(entry)
                        w.load += len(entry[2])
                        w.sent += 1
                        self._queue(w, entry[2])
        if self.waiting and self.queued <= SMALL // 2:
            self.waiting = False
            self.room.notify()
        if self.ending and not queue:
            for w in self.workers.values():
                if not w.pending and not w.closing:
                    w.closing = True
                    self._queue(w, _END)

    def _room(self, w, size, first):
        # A task beyond the second only while more wait than there are workers (those that
        # are not ready yet may still take one each).
        if self.maxtasks and w.sent >= self.maxtasks:
            return False
        held = len(w.pending)
        return not held or not first and held < w.depth and (
            held < 2 or len(self.queue) > len(self.workers)) and \
            w.load - len(w.pending[0][2]) + size <= ROOM

    def _queue(self, w, data):
        w.outbox.append(data)
        if not w.writing:
            w.writing = True
            self.todo.append(w)

    def _write_out(self):
        """Write what was queued for workers nobody writes to yet, outside the lock (a big task
        waits for its worker to read it); a thread queuing meanwhile leaves it to this one."""
        closed = False
        while self.todo:
            with self.lock:
                if not self.todo:
                    break
                w = self.todo.pop()
            while True:
                with self.lock:
                    if w.dead or not w.outbox:
                        w.outbox.clear()
                        w.writing = False
                        self.written.notify_all()
                        if w.dead:
                            self.dead.append(w)
                            closed = True
                        break
                    data = w.outbox.popleft()
                try:
                    w.tasks.send_bytes(data)
                except OSError:  # the worker is gone: its death settles its tasks
                    if data is not _END:
                        with self.lock:
                            w.unsent += 1
        if closed:
            self.wake_up()

    # --- receiving (the result handler) ------------------------------------------------------

    def get(self):
        """``Pool._quick_get``: the next ``(job, index, result)``, or what the Pool's own threads
        put on its result queue (None)."""
        while not self.results:
            if not self.wake:  # closed: the Pool terminated
                raise EOFError
            self._wait()
        job, index, result = self.results.popleft()
        if job is _PARENT or type(result) is tuple:
            return result if job is _PARENT else (job, index, result)
        try:
            return (job, index, ForkingPickler.loads(result)[2])
        except Exception as exc:
            return (job, index, (False, _unreadable(result, exc)))

    def _wait(self):
        if self._seen != self.version or self.dead:
            self._follow()
        wake, reader = self._fds
        left = None
        if self.queue and self.gated is None and self.since is not None:
            left = max(0.0, self.since + UNHEARD - time.monotonic())
        # The workers' private memory is read from here, while they hold tasks.
        memory = self.memory
        if memory is not None and any(w.pending for w in list(self.workers.values())):
            due = max(0.0, memory.due - time.monotonic())
            left = due if left is None else min(left, due)
        else:
            memory = None
        events = self._poll.poll(None if left is None else left * 1000 + 1)
        if memory is not None and time.monotonic() >= memory.due:
            _sample_memory(memory, list(self.workers))
        if left is not None and time.monotonic() >= self.since + UNHEARD:
            with self.lock:
                if self.gated is None:
                    self.gated = False
                self._pump()
            if self.todo:
                self._write_out()
        for fd, _ in events:
            if fd == wake:
                os.read(wake, 4096)
            elif fd == reader:
                self.results.append((_PARENT, None, self.reader.recv()))
            else:
                w = self._polled.get(fd)
                if w is not None:
                    with self.lock:
                        self._read(w)
                    if self.todo:
                        self._write_out()

    def _follow(self):
        """Poll the channels of the live workers; close those of the dead."""
        with self.lock:
            self._seen = self.version
            live = {w.fd: w for w in self.workers.values() if not w.eof}
            dead, self.dead = self.dead, []
        for fd in set(self._polled) - set(live):
            self._poll.unregister(fd)
        for w in dead:
            self.discard(w)
        for fd in set(live) - set(self._polled):
            self._poll.register(fd, select.POLLIN)
        self._polled = live

    def _read(self, w):
        """Take in what worker ``w`` has written, without blocking (under the lock)."""
        while not w.eof:
            try:
                size = os.readv(w.fd, [self._chunk])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                size = 0
            if not size:
                w.eof = True
                self.version += 1
                return
            w.buffer += self._view[:size]
            for body in _frames(w.buffer):
                self._heard(w, body)
            if size < _CHUNK:
                return

    def _heard(self, w, body):
        if body == STARTED:
            w.started = True
            if self.gated is None:
                self.gated = True
        elif body == READY:
            w.ready = True
            if self.queue:
                self._pump((w,))
        elif body == IDLE:
            w.idle = True
        elif w.pending:
            job, index, data = w.pending.popleft()
            now = time.monotonic()
            spent, w.began = now - w.began, now
            w.depth = max(2, min(DEEP, int(BUDGET / spent))) if spent > 0 else DEEP
            w.load -= len(data)
            self.answered += 1
            self.results.append((job, index, body))
            # Tasks wait only while no worker has room: w is the only one that has now. It
            # takes more once it has done half of what it holds.
            if self.queue:
                if len(w.pending) <= w.depth // 2:
                    self._pump((w,))
            elif self.ending or self.waiting:
                self._pump()

    def wake_up(self):
        """Wake the result handler (it polls the channels again)."""
        try:
            os.write(self.wake[1].fileno(), b"\0")
        except (OSError, IndexError):
            pass


def _pickled(task):
    """``task`` pickled as ``ForkingPickler.dumps`` does, as bytes. In the task handler: the
    error of a task that cannot be pickled keeps the task (pickled as None: the error still
    pickles), for the note that explains it, made where the error is raised, in the user's
    thread (:func:`_explaining`; the fork rule)."""
    stream = io.BytesIO()
    try:
        ForkingPickler(stream).dump(task)
    except Exception as exc:
        class Unexplained(object):
            def __reduce__(self):
                return type(None), ()
        exc.__dict__[_UNEXPLAINED] = kept = Unexplained()
        kept.task = task
        raise
    return stream.getvalue()


# --- the workers' private memory (mpcompat.workers.dataset_memory) -------------------------------

def _sampler_module():
    """As a Pool is made, in the user's thread, before its workers start (under fork, a page
    written after the fork is copied): the sampler of the workers' private memory; None where
    there is no /proc/PID/smaps."""
    try:
        if os.path.exists("/proc/self/smaps"):
            from mpcompat.workers import dataset_memory
            return dataset_memory
    except Exception:  # never keep a Pool from starting
        pass
    return None


def _start_sampler(memory, pool, dispatcher):
    """The Pool's first workers have started: sample them (from its result handler thread,
    :meth:`Dispatcher._wait`, which imports nothing: the fork rule)."""
    try:
        dispatcher.memory = memory.start_pool(pool, list(pool._pool))
    except Exception:  # never keep a Pool from starting
        pass


def _sample_memory(sampler, processes):
    """In the result handler, when due: follow the live workers ``processes`` and read one."""
    memory = sys.modules["mpcompat.workers.dataset_memory"]
    try:
        memory.track(sampler, processes)
        memory.sample(sampler)
    except Exception:  # never break the result handler
        sampler.due = float("inf")


def say_memory(pool):
    """The note the result handler of ``pool`` found due, said in the user's thread."""
    dispatcher = dispatcher_of(getattr(pool, "_outqueue", None))
    if dispatcher is not None and dispatcher.memory is not None:
        sys.modules["mpcompat.workers.dataset_memory"].say_pending(dispatcher.memory)


def _frames(buffer):
    """Remove the complete messages at the start of ``buffer`` and return them."""
    found = []
    while len(buffer) >= 4:
        size, start = _HEADER.unpack_from(buffer)[0], 4
        if size == -1:
            if len(buffer) < 12:
                break
            size, start = _BIG.unpack_from(buffer, 4)[0], 12
        if len(buffer) < start + size:
            break
        with memoryview(buffer) as view:
            found.append(bytes(view[start:start + size]))
        del buffer[:start + size]
    return found


# --- the parent's side: failures ------------------------------------------------------------------

def _parent_side():
    """Import what the Pool's handler threads need on a failure (the fork rule): the error
    types and the wording of a dead worker's end; before 3.11, ``add_note``. Called as a Pool
    is made, in the user's thread, before its threads start; not when the patch applies (a
    spawn worker applies it, and needs none of it). The records of workers that failed while
    starting come through ``mpcompat.child_failures.channel``, loaded by the patch that opens
    it before the first child starts, or never sent."""
    global errors, exits, notes
    from mpcompat import errors
    from mpcompat.child_failures import exits
    if sys.version_info < (3, 11):
        from mpcompat.diagnose import notes


def _channel():
    """``mpcompat.child_failures.channel`` if loaded (else no worker sent a record)."""
    return sys.modules.get("mpcompat.child_failures.channel")


def _noted(exc, note):
    """``exc``, with mpcompat's ``note`` (shown by tracebacks, kept by pickling)."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        notes.add_note(exc, note)
    return exc


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


def _cannot_pass(record):
    """Whether the start-up error of ``record`` fails every new worker alike: the main-guard
    error, a name missing in the main module."""
    error = record.error or ""
    return error.startswith(("RuntimeError", "AttributeError")) and any(
        text in error for text in _CANNOT_PASS)


def _should_break(dispatcher, processes):
    """The rule (patches.md): no task answered since the first of the start-up failures in a
    row, no live worker ready, and either the last one's error fails every new worker alike (the
    main-guard error, a name missing in the main module), or there were at least
    ``max(MIN_FAILURES, processes)`` of them over at least GRACE seconds."""
    failures, since = dispatcher.failures, dispatcher.failed_since
    if not failures or since[1] != dispatcher.answered or \
            any(w.ready for w in list(dispatcher.workers.values())):
        return False
    record = failures[-1][2]
    return (record is not None and _cannot_pass(record)) or (
        len(failures) >= max(MIN_FAILURES, processes) and time.monotonic() - since[0] >= GRACE)


def _reaped(dispatcher, process, processes):
    """Worker ``process`` exited and was joined (in the worker handler): settle its tasks,
    count it if it died while starting, break the pool by the rule."""
    w = dispatcher.reaped(process)
    if w is None:
        return
    channel = _channel()
    record = channel.take(process.pid) if process.exitcode and channel else None
    # Started but not ready: it died before its first task (in its initializer). Neither: it
    # ran without mpcompat, or died before it could say anything; its record may tell.
    starting = not w.ready and (w.started or (
        record is not None and record.what != TASK_STAGE))
    dispatcher.resolve(w, None if starting else functools.partial(_lost, process, record,
                                                                   w.ready))
    # The workers that failed while starting, in a row: (pid, exitcode, record) each, since
    # (time, tasks answered) at the first of them.
    if not starting:
        dispatcher.failures, dispatcher.failed_since = [], None
        return
    if dispatcher.failed_since is None or dispatcher.failed_since[1] != dispatcher.answered:
        dispatcher.failures, dispatcher.failed_since = [], (time.monotonic(), dispatcher.answered)
    dispatcher.failures.append((process.pid, process.exitcode, record))
    at_once = record is not None and _cannot_pass(record)
    if not at_once:
        _say_start_failure(dispatcher, process, record)
    if dispatcher.broken is None and _should_break(dispatcher, processes):
        error = _broken(dispatcher.failures, time.monotonic() - dispatcher.failed_since[0])
        if at_once:
            error.untold, error.at_once = _untold_line(process, record), True
        dispatcher.break_(error)
        dispatcher.failures = []


def _say_start_failure(dispatcher, process, record):
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
    if cause == dispatcher.said:
        return
    dispatcher.said = cause
    _say("%sPool worker process %d %s; the Pool starts another, and its waits report the "
         "workers that fail alike\n" % (_PREFIX, process.pid, cause))


def _say(line):
    try:
        os.write(2, line.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _untold_line(process, record):
    """The line that names the error of a Pool broken at once (:func:`_say_untold`), with the
    cause: the first sentence of the record's first note (as ``notes.cause_of`` words it)."""
    cause = record.notes[0][len(_PREFIX):] if record.notes else ""
    cause = cause.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(".:")
    cause = " (%s)" % cause if cause else (" (while %s)" % record.what if record.what else "")
    return "%sPool worker process %d failed while starting: %s%s; the Pool broke at once (no " \
        "new worker could start), and nothing raised its BrokenPool\n" % (
            _PREFIX, process.pid, record.headline(), cause)


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
    _say(line)


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
    return _noted(exc, _PREFIX + "\n".join(lines)) if lines else exc


def _broken(failures, seconds):
    """The function that makes the BrokenPool of each task of a broken pool."""
    pids, codes, records = zip(*failures)
    records = [r for r in records if r is not None]
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
    note = _channel().describe_records(records, "Pool worker process", tally=len(pids) > 1) \
        if records else _PREFIX + ("None of them recorded an error: they died without raising "
                                   "(os._exit(), a signal) before the Pool's initializer "
                                   "returned.")

    def error():
        exc = _noted(errors.BrokenPool(message, pids, codes), note)
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
    return _noted(exc, _PREFIX + (
        "the result of this task could not be rebuilt in this process: unpickling %s raised "
        "%s: %s. An exception class whose __init__ takes other arguments than its message "
        "must pass them all to Exception.__init__ (super().__init__(a, b)) or define "
        "__reduce__, so that pickle can rebuild it." % (names, type(exc).__name__, exc)))


def _classes(data):
    """The classes and functions a pickle names, but multiprocessing's own, read without
    calling any of them: ``["__main__.WeirdError"]``."""
    names = []

    class Inert(object):  # stands for each of them: takes any arguments, state, items
        def _take(self, *args, **kwargs):
            pass

        __init__ = __setstate__ = __setitem__ = append = extend = add = _take

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            names.append("%s.%s" % (module, name))
            return Inert

    try:
        Reader(io.BytesIO(data)).load()
    except Exception:
        pass
    return [n for n in dict.fromkeys(names) if not n.startswith(("multiprocessing.",
                                                                 "builtins."))]


def _descriptors_short(processes):
    """``(needed, limit)`` when giving ``processes`` workers a channel each would take this
    process past its limit of open file descriptors (``ulimit -n``), else None."""
    limit = os.sysconf("SC_OPEN_MAX")  # the soft RLIMIT_NOFILE
    needed = FDS_PER_WORKER * processes
    if limit < 0 or needed < limit // 4:
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
    dispatcher.close()
    del pool._outqueue.__dict__[_ATTRIBUTE]
    pool._quick_put, pool._quick_get = pool._inqueue._writer.send, pool._outqueue._reader.recv
    errors.warn(
        "Pool(%d) would need about %d open file descriptors with mpcompat's worker channels "
        "(%d per worker; the standard library's Pool takes %d), over this process's limit "
        "of %d (ulimit -n). It runs as the standard library's Pool: without mpcompat's "
        "guarantees that a worker's death fails its task and that workers failing while "
        "they start break the Pool. Raise the limit (ulimit -n %d) to keep them." % (
            pool._processes, short[0], FDS_PER_WORKER, FDS_PER_WORKER - 2, short[1],
            2 * short[0]), key="pool-descriptors", library=("multiprocessing",))


# --- the hooks ----------------------------------------------------------------------------------

def hooks(original, module):
    """The unbound replacements of the ``Pool`` methods (``original``: name -> the original
    function; ``module``: ``multiprocessing.pool``), without mpcompat's frames in their errors."""

    def _setup_queues(self):
        original["_setup_queues"](self)
        # A process pool's pipe (not a ThreadPool's queue, nor a test's mock context's)
        if isinstance(getattr(self._outqueue, "_reader", None), Connection):
            dispatcher = Dispatcher(self._outqueue)
            self._quick_put, self._quick_get = dispatcher.put, dispatcher.get

    def _repopulate_pool(self):
        dispatcher = dispatcher_of(getattr(self, "_outqueue", None))
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
        memory = _sampler_module()
        try:
            return original["_repopulate_pool"](self)
        finally:
            if not early:
                _parent_side()
            if memory is not None:
                _start_sampler(memory, self, dispatcher)

    def _repopulate_pool_static(ctx, Process, processes, pool, inqueue, outqueue, initializer,
                                initargs, maxtasksperchild, wrap_exception):
        dispatcher = dispatcher_of(outqueue)
        if dispatcher is None:
            return original["_repopulate_pool_static"](
                ctx, Process, processes, pool, inqueue, outqueue, initializer, initargs,
                maxtasksperchild, wrap_exception)
        dispatcher.maxtasks = maxtasksperchild
        # The OOM counters read once for the workers started, where the exit evidence reads them
        evidence = _loaded("mpcompat.child_failures.channel")
        with evidence.batch() if evidence else contextlib.nullcontext():
            for _ in range(processes - len(pool)):
                if dispatcher.broken is not None or dispatcher.terminated:
                    # No new worker, and no fork while the user's threads go on (a fork copies
                    # their locks).
                    break
                w, ends = dispatcher.channel()
                try:
                    p = Process(ctx, target=module.worker, args=(
                        ends, ends, initializer, initargs, maxtasksperchild, wrap_exception))
                    p.name = p.name.replace("Process", "PoolWorker")
                    p.daemon = True
                    p.start()
                except BaseException:
                    dispatcher.discard(w)
                    raise
                finally:
                    ends.conn.close()
                    ends.results.close()
                pool.append(p)
                dispatcher.add(p, w)
        dispatcher.wake_up()
        return None

    def _maintain_pool(ctx, Process, processes, pool, inqueue, outqueue, *args):
        dispatcher = dispatcher_of(outqueue)
        if dispatcher is None:
            return original["_maintain_pool"](ctx, Process, processes, pool, inqueue, outqueue,
                                              *args)
        failures = len(dispatcher.failures)
        if failures and any(w.exitcode is not None for w in list(pool)):
            # No flood of workers that fail the same way: wait longer after each failure.
            time.sleep(min(0.05 * failures, 0.5))
        before = list(pool)
        if module.Pool._join_exited_workers(pool):
            for process in before:
                if process not in pool:
                    _reaped(dispatcher, process, processes)
            module.Pool._repopulate_pool_static(ctx, Process, processes, pool, inqueue,
                                                outqueue, *args)
        return None

    def _terminate_pool(cls, taskqueue, inqueue, outqueue, pool, *args, **kwargs):
        dispatcher = dispatcher_of(outqueue)
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
                channel = _channel()
                if channel is not None:  # workers that died unreaped: nobody will ask why
                    channel.discard([w.pid for w in list(pool) if w.pid])
                if dispatcher.broken is not None:
                    _say_untold(dispatcher)

    def _check_running(self):
        original["_check_running"](self)
        dispatcher = dispatcher_of(getattr(self, "_outqueue", None))
        if dispatcher is not None and dispatcher.broken is not None:
            raise dispatcher.broken()
        say_memory(self)

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

    return {hook.__name__: without_own_frames(functools.wraps(original[hook.__name__])(hook))
            for hook in (_setup_queues, _repopulate_pool, _repopulate_pool_static,
                         _maintain_pool, _terminate_pool, _check_running, _map_async)}
