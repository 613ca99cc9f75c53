"""The channels of a process Pool (patch ``multiprocessing.pool_workers``, patches.md): each
worker has a private duplex channel (a socket pair), and the parent dispatches the tasks.

No worker takes a lock shared with another process, and a worker that dies mid-message spoils
nothing but its own channel. The parent knows, per worker, the tasks sent and not answered yet
(a worker answers its tasks in order, once each): when one dies, the oldest is the one it was
on, and the later ones never started. Unix only (the parent reads its ends without blocking).

Every module the Pool's handler threads need here is imported above (the fork rule).
"""
import collections
import io
import select
import socket
import struct
import threading
import time
import types
import weakref
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

__all__ = ["SMALL", "STARTED", "READY", "IDLE", "Dispatcher", "dispatcher_of",
           "close_inherited"]

# Bytes: a task this small may wait in a busy worker's channel (one at most); put() waits while
# more than this waits in the parent for room in a worker.
SMALL = 64 * 1024
# What a worker says besides results: as it starts; when ready; as it dies waiting for a task
# (of an exception no task raised: Ctrl-C), having started none of those sent to it.
STARTED, READY, IDLE = b"s", b"r", b"i"
# Seconds after its first worker started during which an undecided Pool (``gated`` None) waits
# for a first STARTED before it sends tasks to any worker (workers without mpcompat never
# speak).
UNHEARD = 2.0
_PARENT = object()  # in Dispatcher.results: a message of the parent's own threads
_HEADER, _BIG = struct.Struct("!i"), struct.Struct("!Q")  # multiprocessing.connection's framing
_END = ForkingPickler.dumps(None).tobytes()  # "no more tasks"
_CHUNK = 1 << 16  # bytes read from a channel at once

_dispatchers = weakref.WeakSet()  # of every Pool of this process
_ATTRIBUTE = "_mpcompat_dispatcher"  # on the Pool's result queue


def dispatcher_of(outqueue):
    """The dispatcher of the Pool whose result queue is ``outqueue``, or None."""
    found = getattr(outqueue, _ATTRIBUTE, None)  # a mock answers any name
    return found if isinstance(found, Dispatcher) else None


def close_inherited():
    """In a fork child: close the parent's ends of every channel (EOF must reach workers whose
    parent is gone)."""
    for dispatcher in list(_dispatchers):
        for sock in list(dispatcher.socks):
            sock.close()
        for sock in dispatcher.wake:
            sock.close()
    _dispatchers.clear()


class _Worker(object):
    """The parent's view of one worker: its end of the channel, the tasks sent and not answered
    (``(job, index, pickled task)``, oldest first), what it said, what waits to be written;
    ``unsent``: how many of the newest pending tasks could not be written (it had closed its
    end); ``reset``: it closed its end with bytes unread (at least the newest task); ``idle``: it
    said it died waiting for a task, having started none."""

    def __init__(self, sock):
        self.sock = sock
        self.pending, self.outbox = collections.deque(), collections.deque()
        self.buffer = bytearray()
        self.sent = self.unsent = 0
        self.started = self.ready = self.closing = self.writing = self.eof = self.dead = False
        self.idle = self.reset = False


class Dispatcher(object):
    """A process Pool's side of its workers' channels: ``put`` is its task handler's
    ``Pool._quick_put``, ``get`` its result handler's ``Pool._quick_get``."""

    def __init__(self, outqueue, unreadable):
        # unreadable(data, exc): the error of a task whose result cannot be unpickled
        self.reader, self.unreadable = outqueue._reader, unreadable
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)  # put() waits on it for room in the queue
        self.written = threading.Condition(self.lock)  # a thread stopped writing to a worker
        self.workers = {}  # Process -> _Worker, until reaped
        self.socks = set()  # the parent's ends still open
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
        self.wake = socket.socketpair()  # wakes the result handler
        self.wake[1].setblocking(False)
        self._poll, self._polled, self._seen = select.poll(), {}, -1
        self._chunk = bytearray(_CHUNK)  # what channels are read into
        self._view = memoryview(self._chunk)
        self._fds = (self.wake[0].fileno(), self.reader.fileno())
        for fd in self._fds:
            self._poll.register(fd, select.POLLIN)
        _dispatchers.add(self)
        setattr(outqueue, _ATTRIBUTE, self)

    # --- workers come and go (the thread that starts them: the user's or the worker handler)

    def channel(self):
        """A new channel: the parent's end, and the child's (a Connection) inside what the
        worker function takes as its task and result queues."""
        parent, child = socket.socketpair()
        if socket.getdefaulttimeout() is not None:
            parent.setblocking(True)
            child.setblocking(True)
        with self.lock:
            self.socks.add(parent)
        child = Connection(child.detach())
        return parent, types.SimpleNamespace(get=child.recv, put=child.send, conn=child)

    def add(self, process, sock):
        """Worker ``process`` started with channel end ``sock`` (then :meth:`wake`: the result
        handler reads the new channels)."""
        with self.lock:
            self.workers[process] = _Worker(sock)
            if self.since is None:
                self.since = time.monotonic()
            self.version += 1
            self._pump()
        if self.todo:
            self._write_out()

    def discard(self, sock):
        """Close a channel whose worker did not start."""
        with self.lock:
            self.socks.discard(sock)
        sock.close()

    def reaped(self, process):
        """Worker ``process`` exited and was joined: keep what its channel holds complete, and
        close it (an orphan reads EOF, a blocked write ends). Returns its _Worker, or None."""
        with self.lock:
            w = self.workers.pop(process, None)
            if w is None:
                return None
            self._read(w)
            w.dead = True
            self.dead.append(w.sock)
            self.version += 1
            _shutdown(w.sock)
        self._write_out()
        self.wake_up()
        return w

    def resolve(self, w, error):
        """Settle the tasks dead worker ``w`` held: the oldest fails with ``error()`` (None: it
        never started), the others go to other workers (or fail, once broken)."""
        with self.lock:
            # A write to it in progress fails now (reaped() shut its channel down): wait for
            # the writer to count it unsent, a failed write may have taken the ECONNRESET.
            deadline = time.monotonic() + 2.0
            while w.writing and time.monotonic() < deadline:
                self.written.wait(0.1)
            lost = list(w.pending)
            w.pending.clear()
            # How many it read, oldest first: a worker that spoke started none of the tasks it
            # never read; one that never said it was ready fails the oldest (else a pool whose
            # workers die silently would resend it for ever).
            if w.idle:
                read = 0
            elif w.ready:
                read = len(lost) - max(w.unsent, int(w.reset))
            else:
                read = len(lost)
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
        """The Pool is terminating: wake a put waiting for room; end the writes in progress
        (the workers they wait for are not reading)."""
        self.terminated = True
        with self.lock:
            self.room.notify_all()
            for w in self.workers.values():
                if w.writing:
                    _shutdown(w.sock)

    def close(self):
        """Close every channel (the Pool has terminated)."""
        with self.lock:
            socks, self.socks = self.socks, set()
        for sock in socks:
            sock.close()
        wake, self.wake = self.wake, ()
        for sock in wake:
            sock.close()

    def detach(self, outqueue):
        """Before any worker: the Pool of result queue ``outqueue`` runs without channels."""
        self.close()
        _dispatchers.discard(self)
        if outqueue.__dict__.get(_ATTRIBUTE) is self:
            del outqueue.__dict__[_ATTRIBUTE]

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
        """Send the queued tasks where there is room (in ``workers``, default all): to idle
        ready workers first, then one more to each busy worker if it is small (at most SMALL
        bytes); after the last task, None to each idle worker."""
        queue = self.queue
        if queue and self.broken is None and not self.terminated:
            for most in (1, 2):
                for w in workers or self.workers.values():
                    if w.closing or w.eof or not (w.ready or self.gated is False):
                        continue
                    while queue and len(w.pending) < most and (
                            most == 1 or len(queue[0][2]) <= SMALL) and not (
                            self.maxtasks and w.sent >= self.maxtasks):
                        entry = queue.popleft()
                        self.queued -= len(entry[2])
                        self._assign(w, entry)
        if self.waiting and self.queued <= SMALL // 2:
            self.waiting = False
            self.room.notify()
        if self.ending and not queue:
            for w in self.workers.values():
                if not w.pending and not w.closing:
                    w.closing = True
                    self._queue(w, _END)

    def _assign(self, w, entry):
        w.pending.append(entry)
        w.sent += 1
        self._queue(w, entry[2])

    def _queue(self, w, data):
        w.outbox.append(data)
        if not w.writing:
            w.writing = True
            self.todo.append(w)

    def _write_out(self):
        """Write what was queued for workers nobody writes to yet, outside the lock (a big task
        waits for its worker to read it); a thread queuing meanwhile leaves it to this one."""
        while self.todo:
            with self.lock:
                if not self.todo:
                    return
                w = self.todo.pop()
            while True:
                with self.lock:
                    if w.dead or not w.outbox:
                        w.outbox.clear()
                        w.writing = False
                        self.written.notify_all()
                        break
                    data = w.outbox.popleft()
                try:
                    _send(w.sock, data)
                except OSError:  # the worker is gone: its death settles its tasks
                    if data is not _END:
                        with self.lock:
                            w.unsent += 1

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
            return (job, index, (False, self.unreadable(result, exc)))

    def _wait(self):
        if self._seen != self.version:
            self._follow()
        wake, reader = self._fds
        left = None
        if self.queue and self.gated is None and self.since is not None:
            left = max(0.0, self.since + UNHEARD - time.monotonic())
        events = self._poll.poll(None if left is None else left * 1000 + 1)
        if left is not None and time.monotonic() >= self.since + UNHEARD:
            with self.lock:
                if self.gated is None:
                    self.gated = False
                self._pump()
            if self.todo:
                self._write_out()
        for fd, _ in events:
            if fd == wake:
                self.wake[0].recv(4096)
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
            live = {w.sock.fileno(): w for w in self.workers.values() if not w.eof}
            dead, self.dead = self.dead, []
        for fd in set(self._polled) - set(live):
            self._poll.unregister(fd)
        for fd in set(live) - set(self._polled):
            self._poll.register(fd, select.POLLIN)
        self._polled = live
        for sock in dead:
            self.discard(sock)

    def _read(self, w):
        """Take in what worker ``w`` has written, without blocking (under the lock)."""
        size = _CHUNK
        while size == _CHUNK and not w.eof:
            try:
                size = w.sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionResetError:  # it exited with a task in its channel, unread
                w.reset, size = True, 0
            except OSError:
                size = 0
            if not size:
                w.eof = True
                self.version += 1
                return
            w.buffer += self._view[:size]
            for body in _frames(w.buffer):
                self._heard(w, body)

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
            job, index, _ = w.pending.popleft()
            self.answered += 1
            self.results.append((job, index, body))
            if self.queue or self.ending or self.waiting:
                # Tasks wait only while no worker has room: w is the only one that has now.
                self._pump((w,) if self.queue else None)

    def wake_up(self):
        """Wake the result handler (it polls the channels again)."""
        try:
            self.wake[1].send(b"\0")
        except (OSError, IndexError):
            pass


def _pickled(task):
    """``task`` pickled (ForkingPickler.dumps), as bytes: a memoryview kept while the Pool
    lives would make its BytesIO fail to close if both end in the same garbage cycle."""
    data = ForkingPickler.dumps(task)
    stream = getattr(data, "obj", None)
    if isinstance(data, memoryview) and isinstance(stream, io.BytesIO):
        data.release()
        return stream.getvalue()  # the stream's own bytes: no copy
    return bytes(data)


def _send(sock, data):
    size = len(data)
    header = _HEADER.pack(size) if size <= 0x7fffffff else _HEADER.pack(-1) + _BIG.pack(size)
    if size > 16384:
        sock.sendall(header)
        sock.sendall(data)
    else:
        sock.sendall(header + data)


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


def _shutdown(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
