"""What the kernel measured of a worker's end (Linux): whether its OOM killer killed the worker,
on which evidence, the memory limit it hit, and the worker's peak resident memory.

Evidence, most exact first: the kernel log (``/dev/kmsg``, readable by root or where
``kernel.dmesg_restrict`` is 0) names the pid the OOM killer killed; else the ``oom_kill``
counter of the memory cgroup the worker started in (v2 ``memory.events``, v1
``memory.oom_control``), read as it started (:func:`started`) and as it was reaped
(:func:`reaped`); else ``/proc/vmstat``'s ``oom_kill``, the same way. A counter names no pid. The
peak resident memory is ``ru_maxrss``, which ``os.wait4`` gives the parent that reaps it.

Runs in the threads of Pools and executors that start and reap workers (the fork rule): it
imports nothing after its own import and takes no lock.
"""
import errno
import os
import sys
import threading
import time


_KEPT = 10000            # workers remembered, newest kept
_LOG_RECORDS = 100000    # kernel log records read at most
_CLOCK_SLACK = 5.0       # seconds the kernel log's clock may differ from time.monotonic()
_UNLIMITED = 1 << 60     # a cgroup v1 limit this high means none
_INIT_PID_NS = "pid:[4026531836]"  # the kernel's own pid namespace (PROC_PID_INIT_INO)


class _Worker(object):
    """What is known of one worker: ``since`` (time.monotonic() as it started), ``before`` and
    ``after`` (the oom_kill counters then and as it was reaped), ``peak`` (bytes, or None),
    ``reaper`` ("this process", "the forkserver", or None before it is reaped), ``verdict``
    (:class:`Verdict`, once asked for after it was reaped)."""
    __slots__ = ("since", "before", "after", "peak", "reaper", "verdict")

    def __init__(self, since, before):
        self.since, self.before = since, before
        self.after = self.peak = self.reaper = self.verdict = None


class Verdict(object):
    """Whether the OOM killer killed a process: ``oom`` is "yes", "no", "maybe" or None (no
    evidence here); ``evidence`` says what that rests on, ``limit`` the limit hit (or None)."""
    __slots__ = ("oom", "evidence", "limit")

    def __init__(self, oom, evidence, limit=None):
        self.oom, self.evidence, self.limit = oom, evidence, limit


_workers = {}
_held = threading.local()  # reading: (pid, counters) inside a batch of starts
_cgroup = [None, None]  # [pid of this process, (version, directory) of its memory cgroup]


# --- taking the measures ------------------------------------------------------------------------

def snapshot():
    """The measures to take just before a worker starts: (time, counters). Inside
    :class:`batch`, the counters it read."""
    held = getattr(_held, "reading", None)
    if held is None or held[0] != os.getpid():
        return time.monotonic(), _counters()
    return time.monotonic(), held[1]


class batch(object):
    """``with batch():`` the workers this thread starts in the block share one reading of the
    counters, taken as it begins: a reading taken before a worker starts is a valid "before"
    for it, and a Pool starting its workers reads the counters once, not once per worker."""

    def __enter__(self):
        self.outer = getattr(_held, "reading", None)
        if self.outer is None or self.outer[0] != os.getpid():
            try:
                _held.reading = (os.getpid(), _counters())
            except Exception:
                _held.reading = None
        return self

    def __exit__(self, *exc_info):
        _held.reading = self.outer


def started(pid, before):
    """Worker ``pid`` has started; ``before`` is what :func:`snapshot` returned just before."""
    try:
        _workers.pop(pid, None)
        _workers[pid] = _Worker(before[0], before[1])
        if len(_workers) > _KEPT:
            del _workers[next(iter(_workers))]
    except Exception:  # another thread changed the dict meanwhile: it keeps its own size
        pass


def assume_started(pid, before):
    """Worker ``pid`` started where mpcompat did not see it (a torchrun rank, which its agent
    starts with ``subprocess``), after ``before`` (what :func:`snapshot` returned) at the
    latest: its counters are compared from there. Nothing changes for a worker known."""
    if pid not in _workers:
        started(pid, before)


def reaped(pid, exitcode, rusage=None, reaper="this process"):
    """Worker ``pid`` ended with ``exitcode`` and was reaped by ``reaper`` (``rusage``: what
    ``os.wait4`` gave); after a SIGKILL, the counters are read now."""
    worker = _workers.get(pid)
    if worker is None:
        return
    worker.reaper = reaper
    if rusage is not None:
        # Linux and the BSDs count kilobytes, macOS bytes.
        worker.peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if exitcode == -9:
        worker.after = _counters()


def peak(pid):
    """(peak resident bytes or None, who reaped worker ``pid`` or None)."""
    worker = _workers.get(pid)
    return (None, None) if worker is None else (worker.peak, worker.reaper)


# --- the verdict --------------------------------------------------------------------------------

def oom_verdict(pid):
    """:class:`Verdict`: did the kernel's OOM killer kill process ``pid`` (which died of SIGKILL)?
    The kernel log first (it names the pid), else the counters. Read once per reaped worker
    (the kernel log is long)."""
    worker = _workers.get(pid)
    if worker is not None and worker.verdict is not None:
        return worker.verdict
    verdict = _verdict(pid, worker)
    if worker is not None and worker.reaper is not None:
        worker.verdict = verdict
    return verdict


def _verdict(pid, worker):
    since = worker.since if worker is not None else None
    log = _kernel_log()
    if log:
        verdict = _from_log(pid, since, log)
        if verdict is not None:
            return verdict
    if worker is None:
        return Verdict(None, "no counters were read as it started (patch "
                             "multiprocessing.exit_evidence off, or it started before mpcompat "
                             "was active), and the kernel log is %s" % (
                                 "not readable here" if log is None else "empty"))
    return _from_counters(worker.before, worker.after or _counters())


def _from_log(pid, since, log):
    """The verdict of the kernel log, or None when it cannot tell: it may have lost records
    written since ``since``."""
    mark = "Killed process %d (" % pid
    floor = -1 if since is None else (since - _CLOCK_SLACK) * 1e6
    for index in range(len(log) - 1, -1, -1):
        stamp, message = log[index]
        if stamp < floor:
            break
        if mark in message:
            return Verdict("yes", "the kernel log, /dev/kmsg, names it: \"%s\"" % message.strip(),
                           _limit_in_log(pid, log, index))
    if since is not None and log[0][0] > since * 1e6:
        return None  # records written since it started were overwritten
    return Verdict("no", "the kernel log, /dev/kmsg, names no OOM kill of pid %d%s" % (
        pid, " since it started" if since is not None else ""))


def _limit_in_log(pid, log, index):
    """The limit the kernel log says the kill at ``log[index]`` enforced."""
    constraint = memcg = usage = None
    for stamp, message in reversed(log[max(0, index - 1000):index]):
        if message.startswith("oom-kill:") and (",pid=%d," % pid) in message:
            fields = dict(f.partition("=")[::2] for f in message[9:].split(","))
            constraint, memcg = fields.get("constraint"), fields.get("oom_memcg")
        elif message.startswith("memory: usage ") and usage is None:
            usage = message  # "memory: usage 204800kB, limit 204800kB, failcnt 19"
        elif "invoked oom-killer" in message:
            break
    if usage is not None and constraint in (None, "CONSTRAINT_MEMCG"):
        limit = _kilobytes_after(usage, "limit ")
        if limit is not None:
            return "the limit of memory cgroup %s, %s (the kernel log: \"%s\")" % (
                memcg or "?", size(limit), usage.strip())
    if constraint in (None, "CONSTRAINT_NONE"):
        return _machine_memory()
    return "the memory nodes allowed by its %s" % constraint[len("CONSTRAINT_"):].lower()


def _from_counters(before, after):
    """The verdict of the oom_kill counters read as the worker started and ended."""
    (cgroup_before, vm_before), (cgroup_after, vm_after) = before, after
    cgroup = cgroup_before is not None and cgroup_after is not None and \
        cgroup_before[0] == cgroup_after[0]
    if cgroup and cgroup_after[1] != cgroup_before[1]:
        path, version, directory = cgroup_after[0]
        return Verdict("yes", "the oom_kill counter of its memory cgroup %s (%s) went from %d to "
                              "%d while it ran (a count, not a pid: another process of that "
                              "cgroup killed meanwhile would read the same)" % (
                                  directory, os.path.basename(path), cgroup_before[1],
                                  cgroup_after[1]), _cgroup_limit(version, directory))
    if vm_before is not None and vm_after is not None:
        if vm_after == vm_before:
            return Verdict("no", "its counter did not change: /proc/vmstat's oom_kill, which "
                                 "counts every OOM kill on this machine, stayed at %d while it "
                                 "ran" % vm_after)
        return Verdict("maybe", "/proc/vmstat's oom_kill went from %d to %d while it ran: the "
                                "OOM killer killed some process on this machine (a count, not a "
                                "pid)%s" % (vm_before, vm_after, "; the counter of the memory "
                                            "cgroup it started in did not change" if cgroup
                                            else ""))
    if cgroup:
        return Verdict("no", "its counter did not change: the oom_kill counter of its memory "
                             "cgroup %s stayed at %d while it ran" % (cgroup_after[0][2],
                                                                      cgroup_after[1]))
    return Verdict(None, "this system has no OOM kill counter mpcompat can read (/proc/vmstat, "
                         "a memory cgroup's) and its kernel log is not readable")


# --- reading the kernel's files -----------------------------------------------------------------

def _read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 16384)]  # /proc/vmstat: 6 KB; a larger buffer costs its zeroing
        while chunks[-1]:
            chunks.append(os.read(fd, 16384))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


def _counters():
    """(((file, version, directory), oom_kill) of this process's memory cgroup, or None;
    /proc/vmstat's oom_kill, or None)."""
    cgroup = _memory_cgroup()
    value = None
    if cgroup is not None:
        value = _field(cgroup[0], "oom_kill ")
    return ((cgroup, value) if value is not None else None), _field("/proc/vmstat", "oom_kill ")


def _field(path, name):
    """The number after ``name`` at the start of a line of ``path``, or None."""
    try:
        text = "\n" + _read(path)
    except OSError:
        return None
    start = text.find("\n" + name)
    if start < 0:
        return None
    try:
        return int(text[start + 1 + len(name):].split(None, 1)[0])
    except (ValueError, IndexError):
        return None


def _memory_cgroup():
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
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            paths.setdefault(2, path)
        elif "memory" in controllers.split(","):
            paths[1] = path
    for line in _read("/proc/self/mountinfo").splitlines():
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


def _cgroup_limit(version, directory):
    """The memory limit of a cgroup, said with the file it comes from, or the machine's."""
    name = "memory.limit_in_bytes" if version == 1 else "memory.max"
    try:
        text = _read(os.path.join(directory, name)).strip()
    except OSError:
        text = ""
    if text.isdigit() and int(text) < _UNLIMITED:
        return "the limit of memory cgroup %s, %s (%s)" % (directory, size(int(text)), name)
    return _machine_memory()


def _machine_memory():
    total = _field("/proc/meminfo", "MemTotal:")
    return "the machine's memory, %s (MemTotal)" % size(total * 1024) if total else \
        "the machine's memory"


def _kilobytes_after(text, name):
    start = text.find(name)
    digits = text[start + len(name):].split("kB", 1)[0] if start >= 0 else ""
    return int(digits) * 1024 if digits.isdigit() else None


def _kernel_log():
    """The kernel log's records still held, oldest first, as (microseconds since boot, message),
    or None if it cannot be read here, or names pids of another namespace than this process's
    (a container's). Reads without waiting."""
    try:
        if os.readlink("/proc/self/ns/pid") != _INIT_PID_NS:
            return None  # the log names the kernel's pids, not the ones this process sees
    except OSError:
        pass  # no namespaces (before Linux 3.8)
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records = []
    try:
        while len(records) < _LOG_RECORDS:
            try:
                data = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while read: go on with the next
                    continue
                break  # EAGAIN: none left
            if not data:
                break
            head, _, message = data.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            if len(fields) >= 3 and fields[2].isdigit():
                records.append((int(fields[2]), message.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return records


def size(count):
    """``count`` bytes for a person: "200.0 MiB", "23.6 GiB"."""
    if count >= 1 << 30:
        return "%.1f GiB" % (count / float(1 << 30))
    return "%.1f MiB" % (count / float(1 << 20))
