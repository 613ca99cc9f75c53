"""How much private memory a DataLoader's or a Pool's workers hold, read now and then by the
main process (patches.md, "torch.dataloader_workers: dataset memory"): the success path, kept
tiny.

:func:`start` (the iterator's ``__init__``, ``iter()``) keeps the worker pids, the start method,
this process's resident memory and, under spawn/forkserver, the bytes of each worker's pickled
Process object (the dataset is in it; ``multiprocessing.pickling_notes`` measures it as it
pickles it). :func:`sample` (``_try_get_data``, per batch, in the thread that iterates) reads
one worker's ``/proc/PID/smaps_rollup`` (Private_Dirty, Pss; else the sum over ``smaps``,
kernels < 4.14) at a time, in turn: each every ``INTERVAL`` seconds, or less often where reading
takes more than ``COST_SHARE`` of the time (the kernel walks the worker's page tables: measured
here, 5 ms for a worker mapping 150 MB, 35 ms for one mapping 650 MB); the first reading comes
``INTERVAL`` seconds after ``iter()`` (none for a shorter loop). When a rule holds
(:func:`_grows` under fork; under spawn/forkserver, in :func:`start`: the copies, times
:func:`ranks`, take at least ``COPIES_SHARE`` of :func:`memory_limit`),
:mod:`mpcompat.diagnose.dataset_growth` is loaded and says it once. The readings of each
worker stay in :data:`readings` for the report of its death (``exits``).

A Pool (``multiprocessing.pool_workers``): :func:`start_pool` as it is made, in the user's
thread; :func:`track` and :func:`sample` in its result handler thread while its workers hold
tasks; that thread imports nothing (the fork rule): a growth seen there waits in ``pending``
until the user's thread next calls the Pool or a result's ``get``/``next``
(:func:`say_pending`).
"""
import os
import sys
import time
import weakref

from mpcompat.child_failures import channel  # loaded with the iterator's __init__

INTERVAL = 2.0            # seconds between two readings of a worker, at least,
COST_SHARE = 0.01         # and long enough that reading takes at most this share of the time
GROWTH_MIN = 64 << 20     # bytes each worker's private memory grew by, on average, at least
GROWTH_SHARE = 0.10       # and at least this share of the main process's resident memory
RISE_MIN = 1 << 20        # bytes per worker the last reading rose by: still growing
READINGS_MIN = 3          # readings taken at least (the first is the baseline)
COPIES_SHARE = 0.25       # spawn: pickled copies x ranks, at least this share of the limit
COPIES_MIN = 16 << 20     # spawn: bytes of copies below which the limit is not even read
_KEPT = 1000              # workers whose readings are kept (for the report of their death)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_FORK = "multiprocessing.popen_fork"
_DIRTY, _PSS = b"\nPrivate_Dirty:", b"\nPss:"

FIX = "Fix: keep the large lists and dicts that workers read in shared memory, where they " \
    "read one copy: mpcompat.shared_list(seq) / mpcompat.shared_dict(mapping)."

readings = {}   # pid -> Worker


class Worker(object):
    """A worker's readings: ``first``, ``previous``, ``last`` Private_Dirty (bytes), ``pss``
    (the last Pss), ``since`` and ``at`` (time.monotonic() of the first and last),
    ``count``; ``sampler`` its DataLoader's."""
    __slots__ = ("first", "previous", "last", "pss", "since", "at", "count", "sampler")

    def __init__(self, dirty, pss, now, sampler):
        self.first = self.previous = self.last = dirty
        self.pss, self.since, self.at, self.count, self.sampler = pss, now, now, 1, sampler


class Sampler(object):
    """What is known of the workers of one DataLoader iterator or Pool (``kind``; ``owner``: a
    weak reference to it; ``fork``: its start method is fork; ``resident``: this process's
    resident bytes as they started; ``sent``: the pickled bytes of each worker's Process object,
    or None; ``pending``: the note a Pool's result handler found due; ``blamed``: the container
    to blame and its fix line, once found)."""
    __slots__ = ("pids", "owner", "kind", "fork", "resident", "sent", "due", "said", "turn",
                 "pending", "blamed")

    def __init__(self, owner, workers, kind="DataLoader"):
        self.pids = [w.pid for w in workers]
        self.owner, self.kind, self.pending, self.blamed = weakref.ref(owner), kind, None, None
        self.fork = type(workers[0]._popen).__module__ == _FORK
        self.resident = _resident()
        sent = [w.__dict__.get("_mpcompat_sent_bytes") for w in workers]
        self.sent = None if None in sent else sent
        now = time.monotonic()
        self.due, self.said, self.turn = now + INTERVAL, False, 0
        if self.fork:  # a fork worker's pages are all shared as it starts: its baseline is 0
            for pid in self.pids:
                _keep(pid, Worker(0, 0, now, self))


def start(iterator):
    """Keep a :class:`Sampler` on a DataLoader iterator whose workers have just started."""
    workers = list(getattr(iterator, "_workers", ()))
    if workers and all(w.pid for w in workers):
        iterator._mpcompat_memory = _started(Sampler(iterator, workers))


def start_pool(pool, workers):
    """A :class:`Sampler` of a Pool whose first ``workers`` have just started (None if none
    did), in the user's thread."""
    if workers and all(w.pid for w in workers):
        return _started(Sampler(pool, workers, "Pool"))
    return None


def _started(sampler):
    if sampler.sent is not None and sum(sampler.sent) * ranks() >= COPIES_MIN:
        limit = memory_limit()
        if limit and sum(sampler.sent) * ranks() >= COPIES_SHARE * limit[0]:
            _say(sampler, "copies")
    return sampler


def track(sampler, workers):
    """Sample a Pool's live ``workers`` from now on (a new fork worker's baseline is 0, as at
    :class:`Sampler`)."""
    pids = [w.pid for w in workers if w.pid]
    if sampler.fork:
        now = time.monotonic()
        for pid in pids:
            if pid not in sampler.pids:
                _keep(pid, Worker(0, 0, now, sampler))
    sampler.pids = pids


def sample(sampler):
    """Read the private memory of the next worker in turn (called when ``sampler.due``: one
    worker at a time, so that the thread that iterates stops for one reading only); say it if
    the workers' memory grows."""
    now, pids = time.monotonic(), sampler.pids
    if not pids:
        sampler.due = now + INTERVAL
        return
    pid = pids[sampler.turn % len(pids)]
    sampler.turn += 1
    measured = private_memory(pid)
    # A reading walks the worker's page tables: some ms per 100 MB it maps.
    spent = time.monotonic() - now
    sampler.due = now + max(INTERVAL / len(pids), spent / COST_SHARE)
    if measured is None:
        return
    dirty, pss = measured
    worker = readings.get(pid)
    if worker is None or worker.sampler is not sampler:
        _keep(pid, Worker(dirty, pss, now, sampler))
    else:
        worker.previous, worker.last, worker.pss, worker.at = worker.last, dirty, pss, now
        worker.count += 1
    if not sampler.said and sampler.fork and _grows(sampler):
        if sampler.kind == "Pool":  # in its result handler thread: said by say_pending
            sampler.pending = "growth"
        else:
            _say(sampler, "growth")


def say_pending(sampler):
    """Say the note a Pool's result handler found due, once (in the user's thread)."""
    if sampler.pending and not sampler.said:
        _say(sampler, sampler.pending)


def _keep(pid, worker):
    readings.pop(pid, None)
    readings[pid] = worker
    if len(readings) > _KEPT:
        del readings[next(iter(readings))]


def private_memory(pid, files=("smaps_rollup", "smaps")):
    """(Private_Dirty, Pss) of process ``pid`` in bytes, from the first of ``files`` of
    ``/proc/PID/`` that can be read (smaps_rollup: Linux 4.14+; smaps is summed), or None."""
    for name in files:
        try:
            if name == "smaps_rollup":
                data = channel.read("/proc/%d/smaps_rollup" % pid)
            else:
                with open("/proc/%d/%s" % (pid, name), "rb") as fh:  # long: no short read
                    data = fh.read()
        except OSError:
            continue
        if _DIRTY in data:  # a zombie's reads empty
            return _total(data, _DIRTY), _total(data, _PSS)
    return None


def _total(data, name):
    """The sum of the ``name`` fields (kB) of smaps data, in bytes."""
    total, at = 0, data.find(name)
    while at >= 0:
        start = at + len(name)
        total += int(data[start:data.index(b"kB", start)])
        at = data.find(name, start)
    return total * 1024


def _grows(sampler):
    """The rule (patches.md): over at least ``READINGS_MIN`` readings (a fork worker's first
    is 0, as it starts), the workers' private memory grew, on average per worker, by more than
    ``GROWTH_MIN`` and more than ``GROWTH_SHARE`` of this process's resident memory at
    ``iter()`` (what a fork worker shares and can copy), and it still rose at the last reading
    (by ``RISE_MIN`` per worker)."""
    workers = [w for w in map(readings.get, sampler.pids)
               if w is not None and w.sampler is sampler and w.count >= READINGS_MIN]
    if not workers:
        return False
    count = len(workers)
    growth = sum(w.last - w.first for w in workers)
    return growth > count * max(GROWTH_MIN, GROWTH_SHARE * sampler.resident) and \
        sum(w.last - w.previous for w in workers) > count * RISE_MIN


def grew(pid):
    """The :class:`Worker` readings of ``pid`` if its private memory grew as :func:`_grows`
    counts it (per worker), else None."""
    worker = readings.get(pid)
    if worker is None or worker.count < 2:
        return None
    started = channel.workers.get(pid)
    if started is not None and started.since > worker.since:
        return None  # the pid of a later process
    floor = max(GROWTH_MIN, GROWTH_SHARE * worker.sampler.resident)
    return worker if worker.last - worker.first > floor else None


def death_lines(pid):
    """What a dead worker's error adds if its private memory grew (:func:`grew`): the growth
    and, under fork, what it copied and the fix, else nothing. For a DataLoader's worker the
    container to blame is found now (``dataset_growth``, loaded in the user's thread); a Pool's
    worker handler imports nothing: its worker's line names the container when the Pool's note
    found it, else what was read."""
    worker = grew(pid)
    if worker is None:
        return []
    size = sys.modules["mpcompat.child_failures.exits"].size  # the caller's module
    sampler = worker.sampler
    grew_text = ("to %s in the %.0f s since it was forked" if sampler.fork else
                 "from %s to %%s in %%.0f s while it ran" % size(worker.first)) % (
                     size(worker.last), worker.at - worker.since)
    line = "Its private memory (Private_Dirty) grew %s (mpcompat's readings, the last %.1f s " \
        "before it was found dead)" % (grew_text, time.monotonic() - worker.at)
    if not sampler.fork:
        return [line + "."]
    if sampler.blamed is None and sampler.kind == "DataLoader":
        from mpcompat.diagnose import dataset_growth
        dataset_growth.blame(sampler)
    what, fix = sampler.blamed or ("what it read of the main process's objects", FIX)
    return [line + ": copy-on-read of %s (a fork worker copies each page of it that it reads)."
            % what, fix]


def _say(sampler, why):
    sampler.said = True
    try:
        from mpcompat.diagnose import dataset_growth  # the note fires: loaded now
        dataset_growth.say(sampler, why, sys.modules[__name__])
    except Exception:  # never break the user's loop
        pass


def ranks():
    """The processes of this job on this machine: ``LOCAL_WORLD_SIZE`` (torchrun), else
    ``WORLD_SIZE``, else 1."""
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def memory_limit():
    """(bytes, what it is) of the memory this process may use: its memory cgroup's limit,
    else the machine's (MemTotal); None if neither can be read."""
    cgroup = channel.memory_cgroup()
    if cgroup is not None:
        name = "memory.limit_in_bytes" if cgroup[1] == 1 else "memory.max"
        try:
            text = channel.read(os.path.join(cgroup[2], name)).strip()
        except OSError:
            text = b""
        if text.isdigit() and int(text) < 1 << 60:
            return int(text), "the limit of memory cgroup %s (%s)" % (cgroup[2], name)
    total = channel.field("/proc/meminfo", b"MemTotal:")
    return (total * 1024, "the machine's memory (MemTotal)") if total else None


def _resident():
    """This process's resident memory in bytes (``/proc/self/statm``), or 0."""
    try:
        return int(channel.read("/proc/self/statm").split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0
