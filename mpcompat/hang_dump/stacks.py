"""Stacks as a person reads them in a hang dump (``mpcompat.hang_dump.watchdog``).

A stack is a list of ``(filename, line, function)``, outermost first. Frames of mpcompat are
left out (its demo scenarios are user code); a run of library frames (the standard library,
site-packages) is one line; the user's frames keep their source line. A stack without a
frame of the user's is idle: one line. Worker stacks come from ``faulthandler``'s text
(:func:`parse_faulthandler`); a forked worker's stack starts at ``Process._bootstrap`` (what
is below it is its parent's, copied by the fork).

The watchdog thread runs this: everything is imported here (the fork rule).
"""
import importlib.util  # noqa: F401  linecache imports these lazily from Python 3.14: here,
import linecache
import os
import re
import tokenize  # noqa: F401  not in the watchdog thread (the fork rule)

from mpcompat.workers.user_frames import is_own

__all__ = ["frames_of", "parse_faulthandler", "worker_part", "has_user_frame",
           "innermost_user", "user_frame_text", "condensed", "idle_line"]

_LIBRARY_DIRS = tuple(sorted({d + os.sep for d in (
    os.path.dirname(os.__file__), os.path.realpath(os.path.dirname(os.__file__)))}))
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*)\])? \(most recent "
                     r"call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
_SHOWN_NAMES = 4  # of a run of library frames, the functions named on its line


def frames_of(frame):
    """The stack of the live ``frame``, outermost first."""
    stack = []
    while frame is not None:
        stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return stack[::-1]


def parse_faulthandler(text):
    """The threads in ``faulthandler``'s ``text``: ``[(label, stack)]``, the thread that wrote
    them first (the one the signal reached: the main thread, as a rule), stacks outermost
    first; ``label``: "thread <name or id>" as faulthandler names it."""
    threads = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            label = "thread %s" % (head.group(3) or head.group(2))
            if head.group(1) == "Current thread":
                threads.insert(0, (label, []))
                threads.append(threads[0])  # frames go to the last one read
            else:
                threads.append((label, []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1][1].insert(0, (frame.group(1), int(frame.group(2)), frame.group(3)))
    unique = []
    for thread in threads:
        if not any(thread is other for other in unique):
            unique.append(thread)
    return unique


def worker_part(stack):
    """``stack`` from ``Process._bootstrap`` on: a forked worker's stack below it is the
    parent's, as it was when the worker was forked."""
    for i, (filename, _, function) in enumerate(stack):
        if function == "_bootstrap" and filename.endswith(
                os.path.join("multiprocessing", "process.py")):
            return stack[i:]
    return stack


def _is_library(filename):
    if filename.startswith("<"):
        return True  # <frozen runpy>, <string> (spawn's -c)
    if os.sep + "site-packages" + os.sep in filename or \
            os.sep + "dist-packages" + os.sep in filename:
        return True
    return filename.startswith(_LIBRARY_DIRS) or \
        os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def _shown(stack):
    return [f for f in stack if not is_own(f[0])]


def has_user_frame(stack):
    """Whether ``stack`` holds a frame of the user's code."""
    return any(not _is_library(f[0]) for f in _shown(stack))


def innermost_user(stack):
    """The innermost frame of the user's code in ``stack``, or None."""
    user = [f for f in _shown(stack) if not _is_library(f[0])]
    return user[-1] if user else None


def user_frame_text(frame):
    """``frame`` (of the user's code) as "/path/to/file.py, line N, in f"."""
    return "%s, line %d, in %s" % frame


def _library_frame_text(frame):
    return "%s, line %d, in %s" % (os.path.basename(frame[0]), frame[1], frame[2])


def _file_and_function(frame):
    return "%s %s" % (os.path.basename(frame[0]), frame[2])


def _run_line(run, innermost):
    names = [_file_and_function(f) for f in run]
    if len(names) > _SHOWN_NAMES:
        names = names[:2] + ["..."] + names[-2:]
    text = "  [%d frame%s of libraries: %s" % (len(run), "" if len(run) == 1 else "s",
                                                " > ".join(names))
    if innermost:
        text += "; innermost: %s" % _library_frame_text(run[-1])
    return text + "]"


def condensed(stack):
    """``stack`` as lines, most recent call last: each frame of the user's code with its
    source line, each run of library frames on one line (the innermost run names its innermost
    frame: where the thread waits); mpcompat's frames left out."""
    shown, lines, run = _shown(stack), [], []
    for frame in shown:
        if _is_library(frame[0]):
            run.append(frame)
            continue
        if run:
            lines.append(_run_line(run, False))
            run = []
        lines.append('  File "%s", line %d, in %s' % frame)
        source = linecache.getline(frame[0], frame[1]).strip()
        if source:
            lines.append("    " + source)
    if run:
        lines.append(_run_line(run, True))
    return lines


# The frames that start a thread or a process, above what it was started to run.
_STARTERS = {("threading.py", "_bootstrap"), ("threading.py", "_bootstrap_inner"),
             ("threading.py", "run"), ("process.py", "_bootstrap"), ("process.py", "run"),
             ("spawn.py", "spawn_main"), ("spawn.py", "_main"), ("<string>", "<module>")}


def idle_line(stack):
    """An idle stack (no frame of the user's) on one line: what it runs, and where it waits."""
    shown = _shown(stack)
    if not shown:
        return "no Python frame"
    runs = [f for f in shown if (os.path.basename(f[0]), f[2]) not in _STARTERS] or shown
    if runs[0] is shown[-1]:
        return "in %s" % _library_frame_text(shown[-1])
    return "in %s (innermost: %s)" % (_file_and_function(runs[0]), _library_frame_text(shown[-1]))
