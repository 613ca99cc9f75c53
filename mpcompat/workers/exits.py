"""How a worker process ended, said for a person: the exit code or signal by name, what usually
causes it, and the error the worker recorded."""
import signal

_HINTS = {
    "SIGKILL": "SIGKILL usually means the machine ran out of memory (the kernel's OOM killer "
               "logs it: check `dmesg` or `journalctl -k`) or something outside killed it",
    "SIGSEGV": "SIGSEGV is a crash in native code (an extension such as OpenCV or a custom "
               "op); run with PYTHONFAULTHANDLER=1 to get the Python stack of the crash",
    "SIGBUS": "SIGBUS is often shared memory running out (/dev/shm too small)",
    "SIGABRT": "SIGABRT is an abort in native code; run with PYTHONFAULTHANDLER=1 to get the "
               "Python stack",
}


def _signal_name(exitcode):
    """The name of the signal that ended a process if ``exitcode`` says one did, else None."""
    try:
        return signal.Signals(-exitcode).name if exitcode is not None and exitcode < 0 else None
    except ValueError:
        return None


def describe_exit(exitcode):
    """``"killed by signal 9 (SIGKILL)"``, ``"exit code 3"`` or ``"still running"``."""
    if exitcode is None:
        return "still running"
    if exitcode >= 0:
        return "exit code %d" % exitcode
    name = _signal_name(exitcode)
    return "killed by signal %d" % -exitcode + (" (%s)" % name if name else "")


def exit_hint(exitcode):
    """The likely cause of such an end, or "" when there is nothing general to say."""
    return _HINTS.get(_signal_name(exitcode), "")


def record_lines(intro, record):
    """``intro`` and the error of ``record`` (``mpcompat.workers.child_failures``), then the step
    that failed and its notes, as lines."""
    lines = [intro + record["error"]]
    if record["what"]:
        lines.append("(while %s)" % record["what"])
    return lines + list(record["notes"])


def dead_lines(exitcode, record, intro="Its own error: "):
    """Lines on a dead worker: the likely cause of its end, then its recorded error, if any."""
    hint = exit_hint(exitcode)
    return ([hint + "."] if hint else []) + (record_lines(intro, record) if record else [])
