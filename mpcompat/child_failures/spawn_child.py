"""A spawn or forkserver child whose start failed (``spawn._main``), loaded then: the step that
failed, the cause noted (main guard, a missing attribute), the record sent to the parent
(:mod:`mpcompat.child_failures.channel`) when the parent said it names it, and what the child
prints instead of its traceback: nothing once the parent has the record (the error a worker's
owner raises names it, once for all its workers that failed alike; a plain Process's parent
warns as it sees it end, at the latest as it exits), one line where nobody else would (its
owner's patch off or not applied: no record is sent).

The patches ``multiprocessing.failure_records`` (the step a child is at, what its parent told
it: ``mp_children.child``) and ``multiprocessing.bootstrap_notes`` (the failures of
``spawn._main``) wrap ``multiprocessing.spawn`` and call here. Where mpcompat comes while
``spawn._main`` already runs (the script's own ``import mpcompat``), :class:`ExceptHook` handles
the failure.
"""
import os
import sys

from mpcompat.patches.mp_children import IMPORTING, child

_UNPICKLING = "unpickling the process object its parent sent"
_DONE = "_mpcompat_start_failure"


def step():
    """In a spawn or forkserver child failing in ``spawn._main``: what it was doing."""
    # spawn makes the main module it imported __main__; it is not so while that import fails.
    if child.importing and sys.modules["__main__"].__name__ != "__mp_main__":
        return IMPORTING % child.importing
    return child.stage or _UNPICKLING


def print_line(line):
    """Write ``line`` (what a failing child says instead of its traceback) to stderr."""
    if not line:
        return
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except Exception:
        pass


def main_guard_failed(exc):
    """The main-guard note on ``exc``; in a forkserver importing the main module (which dies of
    it before Python 3.15), the one line it prints instead of its traceback: the process that
    started it names the cause and the fix when it cannot reach it."""
    from mpcompat.diagnose.notes import bootstrap_failed, one_line
    bootstrap_failed(exc)
    if sys.version_info < (3, 15) and _in_forkserver_start():
        return "mpcompat: the forkserver process (pid %d) failed while starting: %s; the " \
               "process that started it reports it\n" % (os.getpid(), one_line(exc))


def _in_forkserver_start():
    """Whether this process is a forkserver importing the main module as it starts."""
    # A frame read: nothing else says that forkserver.main itself runs this import (its
    # children run their own import from forkserver.main too, through spawn._main).
    frame = sys._getframe(1)
    while frame is not None:
        caller = frame.f_back
        if frame.f_code.co_name == "import_main_path" and caller is not None and \
                caller.f_code.co_name == "main" and \
                caller.f_globals.get("__name__") == "multiprocessing.forkserver":
            return True
        frame = caller
    return False


def start_failed(exc):
    """``exc`` is killing this child while ``spawn._main`` starts it: note what is known, and,
    when its parent said it names it (``channel.named_by``), record it for the parent
    (``mpcompat.child_failures.channel``). Returns what to print instead of the traceback: ""
    once the parent got the record (it names the cause once); one line where the parent names
    nothing (a worker whose owner's patch is off: no record is sent); None without a parent's
    channel, or when the record could not be sent (the traceback, with the full notes, is the
    only report). Never raises."""
    try:
        if exc.__dict__.get(_DONE):
            return None
        exc.__dict__[_DONE] = True
        from mpcompat.child_failures import channel
        from mpcompat.diagnose.notes import note_missing_attribute, start_failure_line
        note_missing_attribute(exc)
        named = channel.named_by()
        if named == channel.BY_NOBODY:
            return start_failure_line(exc)  # the only report: its parent names nothing
        if named is None or channel.record(exc, what=step()) is None:
            return None
        return ""
    except Exception:
        return None


class ExceptHook(object):
    """A ``sys.excepthook`` that handles a start-up failure, then calls the previous hook."""

    def __init__(self, previous):
        self.previous = previous
        self.active = True

    def __call__(self, etype, value, tb):
        if self.active and isinstance(value, Exception) and \
                sys.modules["multiprocessing.process"]._parent_process is None:
            # before Process._bootstrap, which reports what it runs itself
            line = start_failed(value)
            if line is not None:
                return print_line(line)
        return (self.previous or sys.__excepthook__)(etype, value, tb)
