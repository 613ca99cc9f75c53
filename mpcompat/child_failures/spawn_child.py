"""A spawn or forkserver child starting up (``spawn._main``): the step it is at, and, when a
step fails, the cause noted (main guard, a missing attribute), the record sent to the parent
(:mod:`mpcompat.child_failures.channel`) when the parent said it names it, and what the child
prints instead of its traceback: nothing once the parent has the record (the error a worker's
owner raises names it, once for all its workers that failed alike; a plain Process's parent
warns as it sees it end, at the latest as it exits), one line where nobody else would (its
owner's patch off or not applied: no record is sent).

The patches ``multiprocessing.failure_records`` (:func:`staged` steps) and
``multiprocessing.bootstrap_notes`` (:func:`hooked` failures) wrap ``multiprocessing.spawn``
with these. Where mpcompat comes while ``spawn._main`` already runs (the script's own
``import mpcompat``), :func:`joined_late` takes the parent's channel, and :class:`ExceptHook`
handles the failure.
"""
import functools
import os
import sys

from mpcompat.child_failures import channel
from mpcompat.workers.user_frames import without_own_frames

_UNPICKLING = "unpickling the process object its parent sent"
IMPORTING = "importing the main module %s as __mp_main__"
_DONE = "_mpcompat_start_failure"


class _Child(object):
    """``stage``: what ``spawn._main`` does in this child (:func:`staged`); ``importing``: the
    main module being imported when mpcompat came with it."""
    stage = importing = None


_child = _Child()


def staged(stage, hear=False):
    """A wrapper that sets ``_child.stage`` (``%s``: the first argument) while the wrapped step
    runs, left set if it fails; ``hear``: the first argument is the preparation data."""
    def wrap(original):
        @functools.wraps(original)
        def staged(arg, *args, **kwargs):
            if hear:
                channel.heard_from_parent(arg)
            outer, _child.stage = _child.stage, stage % arg if "%s" in stage else stage
            result = original(arg, *args, **kwargs)
            _child.stage = outer
            return result
        return without_own_frames(staged)
    return wrap


def step():
    """In a spawn or forkserver child failing in ``spawn._main``: what it was doing."""
    # spawn makes the main module it imported __main__; it is not so while that import fails.
    if _child.importing and sys.modules["__main__"].__name__ != "__mp_main__":
        return IMPORTING % _child.importing
    return _child.stage or _UNPICKLING


def joined_late(module):
    """mpcompat came late into a spawn or forkserver child (the script's ``import mpcompat``):
    take the parent's channel from a running ``spawn._main``, and note the main module being
    imported, if it is."""
    # A frame read: the preparation data the parent sent is held by spawn._main's frame alone.
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_name != "_main" or
                                 frame.f_globals is not module.__dict__):
        frame = frame.f_back
    if frame is None:
        return  # a fork child, or a forkserver importing the main module (Python 3.14+)
    channel.heard_from_parent(frame.f_locals.get("preparation_data"))
    main = sys.modules.get("__mp_main__")
    if main is not None and main is not sys.modules.get("__main__"):  # runpy's, while it runs
        _child.importing = getattr(main.__spec__, "name", None) or main.__file__


def hooked(original, errors, on_error):
    """``original``, calling ``on_error(exc)`` for an error of type ``errors`` it raises; when
    that returns a string, it is printed instead of the traceback (nothing for ""), and the
    process exits with code 1; None: the error goes on."""
    @functools.wraps(original)
    def hooked(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except errors as exc:
            line = None
            try:
                line = on_error(exc)
            except Exception:
                pass
            if line is None:
                raise
        _print(line)
        raise SystemExit(1)  # spawn_main exits with it; a forkserver child exits 1 in any case
    return hooked


def _print(line):
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
                return _print(line)
        return (self.previous or sys.__excepthook__)(etype, value, tb)
