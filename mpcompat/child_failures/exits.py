"""How a child process ended, said for a person from what was measured: the one place every
report of a dead worker (a Pool's, an executor's, a DataLoader's, torch.multiprocessing.spawn's,
a plain Process's) words it, loaded when a failure is seen (or, where a helper thread reports it,
by the user's thread as the Pool or executor is made: plain formatting, no import at call time).

- The exit code or signal by name; what an exit code means where Python defines it.
- A SIGKILL: whether the kernel's OOM killer sent it (:func:`oom_verdict`: the kernel log, else
  the counters :mod:`.channel` read as the worker started and ended), the limit hit and the
  worker's peak memory; for a DataLoader worker whose private memory mpcompat read growing,
  that growth and what it copied (``mpcompat.diagnose.dataset_growth``).
- A native crash: the worker's Python stack at the crash, read from the file the patch
  ``multiprocessing.failure_records`` had faulthandler write (:func:`crash_lines`); for a SIGBUS,
  or torch's "unable to allocate shared memory", /dev/shm's measured facts and the fix
  (:func:`shm_lines`).
- Then the error the worker recorded. Also: a forkserver that died, named on the error of the
  start it failed (:func:`forkserver_died`).
"""
import errno
import faulthandler
import os
import signal
import sys
import time

from mpcompat.activation import imported
from mpcompat.child_failures import channel

_RECORDS = "mpcompat.patches.mp_children"  # a child's own crash file (loaded where armed)

# What the signal itself says; the stack at the crash (crash_lines) says where.
_CRASHES = {
    "SIGSEGV": "a crash in native code (an extension such as OpenCV, or a custom op)",
    "SIGBUS": "a bad memory access in native code: a mapped file or shared memory (/dev/shm) "
              "that ran out",
    "SIGABRT": "an abort in native code (a failed assertion, abort())",
    "SIGFPE": "an arithmetic error in native code (an integer division by zero)",
    "SIGILL": "an illegal instruction in native code (a build for another CPU)",
}
_SIGKILL = -9
_OTHER_SENDER = ("another process sent SIGKILL (a job scheduler's time or memory limit, "
                 "`kill -9`)")


def _signal_name(exitcode):
    """The name of the signal that ended a process if ``exitcode`` says one did, else None."""
    try:
        return signal.Signals(-exitcode).name if exitcode is not None and exitcode < 0 else None
    except ValueError:
        return None


def describe_exit(exitcode, pid=None):
    """``"killed by signal 9 (SIGKILL)"``, ``"exit code 3"`` or ``"still running"``; with the
    dead process's ``pid``, a SIGKILL the kernel log shows the OOM killer sent is
    ``"killed by the kernel's OOM killer: signal 9, SIGKILL"``."""
    if exitcode is None:
        return "still running"
    if exitcode >= 0:
        return "exit code %d" % exitcode
    if exitcode == _SIGKILL and pid is not None and _oom(pid).oom == "yes":
        return "killed by the kernel's OOM killer: signal 9, SIGKILL"
    return _signal_text(exitcode)


def _signal_text(exitcode):
    name = _signal_name(exitcode)
    return "killed by signal %d" % -exitcode + (" (%s)" % name if name else "")


def _oom(pid):
    try:
        return oom_verdict(pid)
    except Exception as exc:  # a report of a dead worker must not fail
        return Verdict(None, "reading it failed (%s: %s)" % (
            type(exc).__name__, exc))


def exit_cause(exitcode, record=None, pid=None, shm=None):
    """Lines saying what ended a process that exited with ``exitcode``, from what was measured
    (``pid``: the dead process's) and what it recorded (``record``, see ``record_lines``);
    ``shm``: what :func:`shm_lines` takes of a DataLoader (its workers and
    prefetch_factor), for a SIGBUS."""
    if exitcode is None or exitcode == 0:
        return []
    if exitcode == _SIGKILL:
        return _sigkill_lines(pid)
    if exitcode < 0:
        return _crash_lines(_signal_name(exitcode), pid, shm)
    return [_exit_code_line(exitcode, record, pid)]


def _crash_lines(name, pid, shm):
    if name not in _CRASHES:
        return []
    lines = ["%s is %s." % (name, _CRASHES[name])]
    stack = crash_lines(pid) if pid is not None else []
    if not stack and not _user_faulthandler_on():
        stack = ["Its Python stack at the crash was not captured (mpcompat was not active in "
                 "it from its start): run with PYTHONFAULTHANDLER=1 to get it."]
    lines += stack
    if name == "SIGBUS":
        lines += shm_lines(**(shm or {}))
    return lines


def _exit_code_line(code, record, pid):
    if record is None and pid is not None:
        # The caller may name the record apart (a DataLoader's note): a worker that recorded
        # its error printed no traceback, or one line at most.
        record = channel.take(pid, keep=True)
    error = record.error if record is not None else ""
    if error.split(":", 1)[0] == "SystemExit":
        return "Exit code %d: the worker raised SystemExit itself (sys.exit())." % code
    if code == 1:
        return "Exit code 1: an exception nobody caught ended it (Python's exit code for that%s)." \
            % ("" if record else "; its traceback is on the worker's stderr")
    if code == 120:
        return ("Exit code 120: Python failed while shutting the worker down: flushing "
                "sys.stdout or sys.stderr at exit raised (a closed pipe, a full disk); the work "
                "before it had finished.")
    if code == 255:
        forkserver = pid is not None and channel.peak(pid)[1] == "the forkserver"
        return ("Exit code 255: it exited with -1 (sys.exit(-1), os._exit(-1) or a C "
                "library's exit(-1): an exit status is 0-255, so -1 reads 255)%s." % (
                    ", or the forkserver that started it could not read its status (it says "
                    "255 then: the forkserver died)" if forkserver else ""))
    return ("Exit code %d: not one Python itself exits with (it uses 1 for an uncaught "
            "exception, 120 for a failed flush at exit): the worker's code, or a library it "
            "called, chose it (os._exit(%d), exit(%d) in C, or sys.exit(%d))." % (
                code, code, code, code))


def _sigkill_lines(pid):
    if pid is None:
        return ["SIGKILL comes from the kernel's OOM killer or from another process (a job "
                "scheduler's limit, `kill -9`): which one is not known here."]
    verdict = _oom(pid)
    if verdict.oom == "no":
        lines = ["Not the OOM killer (%s): %s." % (verdict.evidence, _OTHER_SENDER)]
    elif verdict.oom is None:
        lines = ["SIGKILL comes from the kernel's OOM killer or from another process (a job "
                 "scheduler's limit, `kill -9`); no evidence here of which: %s." % (
                     verdict.evidence)]
    else:
        lines = [("Out of memory: the kernel's OOM killer killed it" if verdict.oom == "yes"
                  else "Maybe out of memory: the kernel's OOM killer may have killed it")
                 + ". Evidence: %s." % verdict.evidence]
        if verdict.limit:
            lines.append("The limit it hit: %s." % verdict.limit)
    peak, reaper = channel.peak(pid)
    if peak is not None:
        lines.append("Its peak resident memory: %s (ru_maxrss, as %s reaped it)." % (
            size(peak), reaper))
    elif reaper == "the forkserver":
        lines.append("Its peak resident memory is not known: the forkserver reaped it, and "
                     "tells only its exit status.")
    sampled, finished = imported("mpcompat.workers.dataset_memory")  # a DataLoader's workers
    if sampled is not None and finished:
        lines += sampled.death_lines(pid)
    return lines


def record_lines(intro, record, short=False):
    """``intro`` and the error of ``record`` (``mpcompat.child_failures.channel``; ``short``: its
    headline), then the step that failed and its notes, as lines."""
    lines = [intro + (record.headline() if short else record.error)]
    if record.what:
        lines.append("(while %s)" % record.what)
    return lines + list(record.notes)


def dead_lines(exitcode, record, intro="Its own error: ", pid=None, shm=None):
    """Lines on a dead worker (``pid``): what ended it, from what was measured, then its
    recorded error, if any (``shm``: see :func:`exit_cause`)."""
    return exit_cause(exitcode, record, pid, shm) + (
        record_lines(intro, record) if record else [])


# --- the OOM killer's part -----------------------------------------------------------------------

_LOG_RECORDS = 100000    # kernel log records read at most
_CLOCK_SLACK = 5.0       # seconds the kernel log's clock may differ from time.monotonic()
_UNLIMITED = 1 << 60     # a cgroup v1 limit this high means none
_INIT_PID_NS = "pid:[4026531836]"  # the kernel's own pid namespace (PROC_PID_INIT_INO)


class Verdict(object):
    """Whether the OOM killer killed a process: ``oom`` is "yes", "no", "maybe" or None (no
    evidence here); ``evidence`` says what that rests on, ``limit`` the limit hit (or None)."""
    __slots__ = ("oom", "evidence", "limit")

    def __init__(self, oom, evidence, limit=None):
        self.oom, self.evidence, self.limit = oom, evidence, limit


def oom_verdict(pid):
    """:class:`Verdict`: did the kernel's OOM killer kill process ``pid`` (which died of SIGKILL)?
    The kernel log first (it names the pid), else the counters. Read once per reaped worker
    (the kernel log is long)."""
    worker = channel.workers.get(pid)
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
    return _from_counters(worker.before, worker.after or channel.counters())


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


def _cgroup_limit(version, directory):
    """The memory limit of a cgroup, said with the file it comes from, or the machine's."""
    name = "memory.limit_in_bytes" if version == 1 else "memory.max"
    try:
        text = channel.read(os.path.join(directory, name)).decode(
            "ascii", "replace").strip()
    except OSError:
        text = ""
    if text.isdigit() and int(text) < _UNLIMITED:
        return "the limit of memory cgroup %s, %s (%s)" % (directory, size(int(text)), name)
    return _machine_memory()


def _machine_memory():
    total = channel.field("/proc/meminfo", b"MemTotal:")
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


# --- a native crash's stack ----------------------------------------------------------------------

_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY = (os.path.dirname(os.path.abspath(os.__file__)) + os.sep,)
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_MAX_FRAMES = 40
_BOOTSTRAP = os.path.join("multiprocessing", "process.py")


def crash_lines(pid):
    """In a parent: the Python stack of its child ``pid`` at the native crash that killed it, as
    lines, the user's innermost frame named first ("It crashed in work() at job.py:12", then the
    stack), or [] when none was captured. Removes what it read. Never raises."""
    try:
        text = _take(channel.path(pid))
        if text is not None:
            return _stack_lines(text)
        if _user_faulthandler_on():
            return ["faulthandler, on in this program, wrote its Python stack at the crash to "
                    "its stderr (above)."]
    except Exception:
        pass
    return []


def _user_faulthandler_on():
    """Whether this program turned ``faulthandler`` on itself (``PYTHONFAULTHANDLER``,
    ``-X faulthandler``, ``-X dev``, ``faulthandler.enable()``): then its workers write their
    stack at a crash to their stderr, and no hint may tell the user to turn it on."""
    records = sys.modules.get(_RECORDS)
    armed = records.crash.armed if records is not None else None
    if armed is not None and armed[0] == os.getpid():  # ours, in a worker that is a parent
        return records.crash.user
    return faulthandler.is_enabled()


def _take(path):
    """The text of the file at ``path``, which is then removed; None without one, or empty."""
    if not path:
        return None
    try:
        with open(path, "rb") as stream:
            if os.fstat(stream.fileno()).st_uid != os.getuid():
                return None  # not one of ours
            data = stream.read(200000)
    except OSError:
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    data = data.split(b"\0", 1)[0]  # the rest of the room reserved
    return data.decode("utf-8", "replace") if data.strip() else None


def _stack_lines(text):
    """Lines for a faulthandler dump: where the user's code crashed, then the stack without
    mpcompat's frames."""
    frames = [f for f in _frames(text) if not f[0].startswith(_OWN)]
    # The frames outside the process's own run(): how multiprocessing started it.
    frames = frames[:next((i for i, f in enumerate(frames) if f[2] == "_bootstrap" and
                           f[0].endswith(_BOOTSTRAP)), len(frames))]
    if not frames:
        return ["Its Python stack at the crash: no Python frame (the crash came in a thread "
                "that runs no Python code)."]
    path, line, name = next((f for f in frames if not _library(f[0])), frames[0])
    source = _source_line(path, line)
    lines = ["It crashed in %s() at %s:%s%s." % (name, path, line,
                                                ": `%s`" % source if source else "")]
    lines.append("Its Python stack at the crash (most recent call first, from faulthandler):")
    lines += ['  File "%s", line %s in %s' % f for f in frames[:_MAX_FRAMES]]
    if len(frames) > _MAX_FRAMES:
        lines.append("  ... (%d more frames)" % (len(frames) - _MAX_FRAMES))
    return lines


def _frames(text):
    """(path, line, function) of each frame of a faulthandler dump, innermost first."""
    frames = []
    for raw in text.splitlines():
        if not raw.startswith('  File "'):
            continue
        path, sep, rest = raw[len('  File "'):].rpartition('", line ')
        line, _, name = rest.partition(" in ")
        if sep:
            frames.append((path, line, name))
    return frames


def _library(path):
    return path.startswith(_LIBRARY) or path.startswith("<") or any(
        part in path for part in _LIBRARY_PARTS)


def _source_line(path, line):
    """The stripped text of line ``line`` of the file at ``path``, or ""."""
    try:
        number = int(line)
        with open(path, "rb") as stream:
            for index, raw in enumerate(stream, 1):
                if index == number:
                    return raw.decode("utf-8", "replace").strip()[:200]
    except (OSError, ValueError):
        pass
    return ""


# --- /dev/shm, for a worker that ran out of shared memory ----------------------------------------
# A SIGBUS (torch before 2.10 writes a batch into a /dev/shm segment the tmpfs cannot back), or
# an error: 2.10+'s "unable to allocate shared memory(shm) ... No space left on device"; before,
# where /dev/shm was full already, "unable to write to file </torch_...>". DataLoader workers
# put each batch's tensors in /dev/shm; the loader keeps up to num_workers x prefetch_factor
# batches there ahead of the one the program uses. A container's /dev/shm is 64 MiB unless
# --shm-size says otherwise.

SHM = "/dev/shm"
_MIB = 1024 * 1024
_ENOSPC = "No space left on device"


def usage(path=SHM):
    """(size, used) of the file system at ``path`` in bytes, or None where it cannot be read
    (no /dev/shm: macOS, Windows)."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    size = st.f_blocks * st.f_frsize
    return (size, size - st.f_bavail * st.f_frsize) if size else None


def is_shm_error(exc):
    """Whether ``exc`` is torch's failure to allocate a shared-memory segment for lack of
    space: 2.10+'s "unable to allocate shared memory ... No space left on device", or before,
    "unable to write to file </torch_...>" (the segment's last byte, where /dev/shm was full
    already: another worker's segment took the space)."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        _ENOSPC in text and "shared memory" in text or "unable to write to file </torch_" in text)


def failed_allocation(tb):
    """The bytes the failed allocation asked for, read from traceback ``tb`` of
    :func:`is_shm_error`'s error (torch's ``UntypedStorage._new_shared(size)``, or 1.x's
    ``FloatStorage._new_shared(size)``, in elements), or None."""
    size = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_new_shared" and isinstance(frame.f_locals.get("size"), int):
            size = frame.f_locals["size"]  # the innermost: the untyped storage's, in bytes
            typed = frame.f_locals.get("cls")  # torch 1.x: a typed storage class
            if getattr(typed, "__name__", "UntypedStorage") != "UntypedStorage":
                try:
                    size *= typed().element_size()
                except Exception:
                    size = None
        tb = tb.tb_next
    return size


def _mib(size):
    return "%.1f MiB" % (size / float(_MIB))


def shm_lines(workers=None, prefetch_factor=None, batch_bytes=None, measured=None):
    """Lines on /dev/shm at the failure: its size and use (``measured``: (size, used) taken
    when the failure was seen, else read now), what one batch needed (``batch_bytes``, when
    measured), what a loader of ``workers`` x ``prefetch_factor`` holds at once, and the fix
    with numbers (``--shm-size``, ``--ipc=host``, the sharing strategy). [] where there is no
    /dev/shm to measure. Never raises."""
    try:
        return _lines(workers, prefetch_factor, batch_bytes, measured or usage())
    except Exception:
        return []


def _lines(workers, prefetch_factor, batch_bytes, measured):
    if measured is None:
        return []
    size, used = measured
    lines = ["%s: %s in all, %s of it in use (%s free) when the failure was seen." % (
        SHM, _mib(size), _mib(used), _mib(size - used))]
    if batch_bytes:
        lines.append("The shared-memory allocation that failed asked for %s (the tensors of "
                     "one batch, which a worker puts in %s to send it)." % (_mib(batch_bytes),
                                                                          SHM))
    held = workers * prefetch_factor if workers and prefetch_factor else None
    if held:
        lines.append("The loader keeps up to %d batches in %s at once (num_workers=%d x "
                     "prefetch_factor=%d), and the one the program is using%s." % (
                         held, SHM, workers, prefetch_factor,
                         ": %s" % _mib((held + 1) * batch_bytes) if batch_bytes else ""))
    if held and batch_bytes:
        fits = -(-(held + 1) * batch_bytes * 5 // (4 * _MIB))  # 25% for the rest
        lines.append("Fix: a %s of at least %d MiB: `docker run --shm-size=%dm` (Kubernetes: "
                     "an emptyDir volume with medium: Memory and sizeLimit: %dMi on %s), or "
                     "`docker run --ipc=host` to use the host's; or fewer workers, a smaller "
                     "prefetch_factor or smaller batches." % (SHM, fits, fits, fits, SHM))
    else:
        lines.append("Fix: a larger %s: `docker run --shm-size=...` of at least (num_workers "
                     "x prefetch_factor + 1) x one batch's size, plus a quarter, or `docker "
                     "run --ipc=host` to use the host's; or fewer workers, a smaller "
                     "prefetch_factor or smaller batches." % SHM)
    lines.append("torch.multiprocessing.set_sharing_strategy('file_system') does not help "
                 "here: it changes how segments are named and passed (against running out of "
                 "file descriptors), and both strategies keep them in %s." % SHM)
    return lines


# --- a plain Process's end ----------------------------------------------------------------------

def name_ended(process, plain, measured=True):
    """A plain Process that ended non-zero (join; is_alive, ``measured`` False: it leaves a
    crash to join, which reads its stack): warn, once per cause, with what it recorded, or, at
    join, with what was measured (``plain``: pid -> (name, file, line) of the plain Processes
    started). Returns what the patch keeps: True (looked into), "looked" (is_alive found no
    record)."""
    record = channel.take(process.pid)
    if record is not None:  # warn, once per cause, with what the child recorded
        _warn_record(record, "Process %r" % process.name, at=_exit_join_at(process, plain))
    elif not measured:
        return "looked"  # is_alive looks once; join measures
    else:
        _died_unheard(process)
    plain.pop(process.pid, None)
    return True


def name_untaken(records, plain):
    """As the parent exits: warn of the ``records`` nobody took of plain Processes (``plain``),
    at the line that started each."""
    for record in records:
        started = plain.pop(record.pid, None)
        if started is not None:
            _warn_record(record, "Process %r" % started[0], at=started[1:])


def _exit_join_at(process, plain):
    """The line that started ``process`` when multiprocessing itself joins it as this process
    exits (no line of the user's is on the stack then), else None: the user's frame."""
    frame = channel._outside_mpcompat(sys._getframe(1))
    started = plain.get(process.pid)
    at_exit = frame.f_globals.get("__name__") == "multiprocessing.util"
    return started[1:] if started is not None and at_exit else None


def _warn_record(record, what, at=None):
    from mpcompat.errors import warn
    note = channel.describe_records([record], what)
    warn(note[len(channel.PREFIX):], key=repr(record.alike()), at=at)


def _died_unheard(process):
    """A plain Process ended with no record: warn, once per cause, when what ended it was not
    the parent's doing (a native crash; a SIGKILL the OOM killer is shown to have sent), with
    what was measured."""
    lines = dead_lines(process.exitcode, None, pid=process.pid)
    how = describe_exit(process.exitcode, process.pid)
    if -process.exitcode in channel.CRASH_SIGNALS or "OOM killer" in how:
        from mpcompat.errors import warn
        warn("Process %r (pid %d) was %s.\n%s" % (process.name, process.pid, how,
                                                   "\n".join(lines)),
             key="process-%s" % how)


# --- a forkserver that died ----------------------------------------------------------------------

def forkserver_died(exc, pid):
    """``exc`` came from forkserver ``pid``, which could not start a child: if it has exited,
    say so on ``exc``, with the main script's module-level line that killed it. Never raises."""
    try:
        status = _exit_status(pid) if pid else None
        if status is None:
            return
        from mpcompat.diagnose import main_guard
        from mpcompat.diagnose.notes import PREFIX, add_note
        path = main_guard.main_file()
        text = ("the forkserver process (pid %d), which starts this program's forkserver child "
                "processes, %s before it could start this one; its own line, above on "
                "stderr, says why." % (pid, status))
        if path is not None and sys.version_info >= (3, 14):
            text += (" From Python 3.14 the forkserver imports the main module, %s, when it "
                     "starts, so the module-level code of %s runs there too."
                     % (path, os.path.basename(path)))
            line = _main_line(path, main_guard)
            if line is not None:
                text += (" Line %d of %s starts processes at module level, outside `if __name__ "
                         "== \"__main__\":`, so it ran again in the forkserver and failed there. "
                         "Put the code that starts processes under `if __name__ == "
                         "\"__main__\":`." % (line, os.path.basename(path)))
        import textwrap
        add_note(exc, textwrap.fill(PREFIX + text, 100))
        from mpcompat.workers.user_frames import explained
        explained(exc)
    except Exception:
        pass


def _exit_status(pid, wait=1.0):
    """How child ``pid`` ended, e.g. "ended (exit code 1)", or None while it runs; not reaped
    (multiprocessing waits for its forkserver itself)."""
    if not hasattr(os, "waitid"):
        return None
    deadline = time.monotonic() + wait  # the socket closes a moment before the exit
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except OSError:
            return None
        if info is not None and info.si_pid:
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            return "ended (%s)" % describe_exit(code, pid)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _main_line(path, main_guard):
    """The line of the main script, at module level outside a main guard, this thread runs."""
    # A frame read: the script's line that starts processes is in no state of multiprocessing.
    frame, line = sys._getframe(1), None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__" \
                and frame.f_code.co_filename == path:
            line = frame.f_lineno
        frame = frame.f_back
    analysis = main_guard.analyze(path) if line is not None else None
    return None if analysis is None or analysis.guards_line(line) else line
