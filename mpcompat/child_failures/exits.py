"""How a worker process ended, said for a person from what was measured: the one place every
report of a dead worker (a Pool's, an executor's, a DataLoader's, torch.multiprocessing.spawn's,
a plain Process's) words it. The exit code or signal by name; what an exit code means where
Python defines it; for a SIGKILL, whether the kernel's OOM killer sent it, on which evidence,
the limit hit and the worker's peak memory (:mod:`.memory_evidence`); for a native crash, the
worker's Python stack at the crash (:mod:`.crash_stacks`) and, for a SIGBUS, /dev/shm's measured
facts (:mod:`.shared_memory`); then the error the worker recorded. Also: a forkserver that
died, named on the error of the start it failed (:func:`forkserver_died`)."""
import os
import signal
import sys

from mpcompat.child_failures import crash_stacks, memory_evidence, shared_memory
from mpcompat.workers.user_frames import explained

# What the signal itself says; the stack at the crash (crash_stacks) says where.
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
        return memory_evidence.oom_verdict(pid)
    except Exception as exc:  # a report of a dead worker must not fail
        return memory_evidence.Verdict(None, "reading it failed (%s: %s)" % (
            type(exc).__name__, exc))


def exit_cause(exitcode, record=None, pid=None, shm=None):
    """Lines saying what ended a process that exited with ``exitcode``, from what was measured
    (``pid``: the dead process's) and what it recorded (``record``, see ``record_lines``);
    ``shm``: what ``shared_memory.shm_lines`` takes of a DataLoader (its workers and
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
    stack = crash_stacks.crash_lines(pid) if pid is not None else []
    if not stack and not crash_stacks.user_faulthandler_on():
        stack = ["Its Python stack at the crash was not captured (mpcompat was not active in "
                 "it from its start): run with PYTHONFAULTHANDLER=1 to get it."]
    lines += stack
    if name == "SIGBUS":
        lines += shared_memory.shm_lines(**(shm or {}))
    return lines


def _exit_code_line(code, record, pid):
    if record is None and pid is not None:
        # The caller may name the record apart (a DataLoader's note): a worker that recorded
        # its error printed no traceback, or one line at most. (Not imported: the channel
        # imports this module; without it loaded, no child can have recorded anything.)
        channel = sys.modules.get("mpcompat.child_failures.channel")
        record = channel.peek(pid) if channel is not None else None
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
        forkserver = pid is not None and memory_evidence.peak(pid)[1] == "the forkserver"
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
    peak, reaper = memory_evidence.peak(pid)
    if peak is not None:
        lines.append("Its peak resident memory: %s (ru_maxrss, as %s reaped it)." % (
            memory_evidence.size(peak), reaper))
    elif reaper == "the forkserver":
        lines.append("Its peak resident memory is not known: the forkserver reaped it, and "
                     "tells only its exit status.")
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
        explained(exc)
    except Exception:
        pass


def _exit_status(pid, wait=1.0):
    """How child ``pid`` ended, e.g. "ended (exit code 1)", or None while it runs; not reaped
    (multiprocessing waits for its forkserver itself)."""
    import time
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
