"""What the kernel measures of a worker's end (Linux), taken as it starts and as it is reaped:
the OOM kill counters and its peak resident memory. The verdict drawn from them is explaining,
:mod:`.exits`' (``oom_verdict``).

Counters: the ``oom_kill`` counter of the memory cgroup the worker started in (v2
``memory.events``, v1 ``memory.oom_control``) and ``/proc/vmstat``'s ``oom_kill``, read as it
starts (:func:`snapshot`, once for the workers started together: :class:`batch`) and, after a
SIGKILL, as it is reaped (:func:`reaped`). A counter names no pid. The peak resident memory is
``ru_maxrss``, which ``os.wait4`` gives the parent that reaps it.

Runs in the threads of Pools and executors that start and reap workers (the fork rule): it
imports nothing after its own import and takes no lock.
"""
import os
import sys
import threading
import time
from types import SimpleNamespace

_KEPT = 10000            # workers remembered, newest kept
_CHUNK = 32768           # bytes read at once: /proc/vmstat is 4-8 KB


# pid -> what is known of each worker: since (time.monotonic() as it started), before and after
# (the oom_kill counters then and as it was reaped), peak (bytes, or None), reaper ("this
# process", "the forkserver", or None before it is reaped), verdict (exits.Verdict, once asked
# for after it was reaped). A SimpleNamespace: made in C, no frame of its own at each start.
workers = {}
_held = threading.local()  # reading: [pid, counters or None] inside a batch of starts
_cgroup = [None, None]  # [pid of this process, (version, directory) of its memory cgroup]


def snapshot():
    """The measures to take just before a worker starts: (time, counters). Inside
    :class:`batch`, the counters its first start read."""
    held = getattr(_held, "reading", None)
    if held is None or held[0] != os.getpid():
        return time.monotonic(), counters()
    if held[1] is None:
        held[1] = counters()
    return time.monotonic(), held[1]


class batch(object):
    """``with batch():`` the workers this thread starts in the block share one reading of the
    counters, taken as the first of them starts: a reading taken before a worker starts is a
    valid "before" for it, and a Pool or a DataLoader starting its workers reads the counters
    once, not once per worker."""

    def __enter__(self):
        self.outer = getattr(_held, "reading", None)
        if self.outer is None or self.outer[0] != os.getpid():
            _held.reading = [os.getpid(), None]
        return self

    def __exit__(self, *exc_info):
        _held.reading = self.outer


def started(pid, before):
    """Worker ``pid`` has started; ``before`` is what :func:`snapshot` returned just before."""
    try:
        workers.pop(pid, None)
        workers[pid] = SimpleNamespace(since=before[0], before=before[1], after=None, peak=None,
                                       reaper=None, verdict=None)
        if len(workers) > _KEPT:
            del workers[next(iter(workers))]
    except Exception:  # another thread changed the dict meanwhile: it keeps its own size
        pass


def assume_started(pid, before):
    """Worker ``pid`` started where mpcompat did not see it (a torchrun rank, which its agent
    starts with ``subprocess``), after ``before`` (what :func:`snapshot` returned) at the
    latest: its counters are compared from there. Nothing changes for a worker known."""
    if pid not in workers:
        started(pid, before)


def reaped(pid, exitcode, rusage=None, reaper="this process"):
    """Worker ``pid`` ended with ``exitcode`` and was reaped by ``reaper`` (``rusage``: what
    ``os.wait4`` gave); after a SIGKILL, the counters are read now."""
    worker = workers.get(pid)
    if worker is None:
        return
    worker.reaper = reaper
    if rusage is not None:
        # Linux and the BSDs count kilobytes, macOS bytes.
        worker.peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if exitcode == -9:
        worker.after = counters()


def peak(pid):
    """(peak resident bytes or None, who reaped worker ``pid`` or None)."""
    worker = workers.get(pid)
    return (None, None) if worker is None else (worker.peak, worker.reaper)


# --- reading the kernel's files -----------------------------------------------------------------

def read(path):
    """The bytes of the file at ``path`` (OSError if it cannot be read)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, _CHUNK)]
        # A short read of a /proc or cgroup file is its end: no second read (a fork child
        # pays for every page written, and each read allocates its buffer).
        while len(chunks[-1]) == _CHUNK:
            chunks.append(os.read(fd, _CHUNK))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def counters():
    """(((file, version, directory), oom_kill) of this process's memory cgroup, or None;
    /proc/vmstat's oom_kill, or None)."""
    cgroup = memory_cgroup()
    value = None
    if cgroup is not None:
        value = field(cgroup[0], b"oom_kill ")
    return ((cgroup, value) if value is not None else None), field("/proc/vmstat", b"oom_kill ")


def field(path, name):
    """The number after ``name`` (bytes) at the start of a line of ``path``, or None."""
    try:
        data = read(path)
    except OSError:
        return None
    at = -1 if data.startswith(name) else data.find(b"\n" + name)
    if at < 0 and not data.startswith(name):
        return None
    start = at + 1 + len(name)
    try:
        return int(data[start:start + 24].split(None, 1)[0])
    except (ValueError, IndexError):
        return None


def memory_cgroup():
    """(counter file, version, directory) of this process's memory cgroup, or None; found once
    per process."""
    if _cgroup[0] != os.getpid():
        try:
            found = _find_memory_cgroup()
        except (OSError, ValueError, IndexError):
            found = None
        _cgroup[:] = [os.getpid(), found]
    return _cgroup[1]


def _find_memory_cgroup():
    """From /proc/self/cgroup and the mounts: v1 where a ``memory`` hierarchy is mounted, else
    v2 where the unified hierarchy has the memory controller."""
    paths = {}
    for line in read("/proc/self/cgroup").decode("utf-8", "replace").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            paths.setdefault(2, path)
        elif "memory" in controllers.split(","):
            paths[1] = path
    for line in read("/proc/self/mountinfo").decode("utf-8", "replace").splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1:]
        if tail[0] == "cgroup" and 1 in paths and "memory" in tail[2].split(","):
            version, name = 1, "memory.oom_control"
        elif tail[0] == "cgroup2" and 2 in paths:
            version, name = 2, "memory.events"
        else:
            continue
        root, path = fields[3], paths[version]
        if root != "/" and not (path + "/").startswith(root + "/"):
            continue
        directory = (fields[4] + path[len(root.rstrip("/")):]).rstrip("/") or "/"
        counter = os.path.join(directory, name)
        if os.path.exists(counter):
            return counter, version, directory
    return None
