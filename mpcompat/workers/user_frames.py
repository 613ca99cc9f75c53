"""The user's frames of a traceback: mpcompat's own wrappers left out of what a user reads.

A traceback that passes through a wrapper of mpcompat (a Pool worker's, a DataLoader worker's)
names mpcompat's file, which makes mpcompat look like the culprit. :func:`trimmed` drops those
frames, unless the error was raised in mpcompat's own code (a real bug of mpcompat keeps all its
frames). An error whose cause mpcompat's note tells in full (:func:`explained`: a forkserver
that died) loses multiprocessing's frames too: the mechanics of a failure already explained.
Imports nothing at call time, but :func:`format_trimmed`: the Pool's helper threads may use it
(the fork rule).
"""
import functools
import os
import sys
import types

__all__ = ["is_own", "trimmed", "explained", "drop_own_frames", "without_own_frames",
           "format_trimmed", "innermost_user_frame"]

_EXPLAINED = "_mpcompat_explained"  # in an exception's __dict__: see explained()

_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_DEMO = os.path.join(_OWN, "demo") + os.sep
_LIBRARY = os.path.dirname(os.path.abspath(os.__file__)) + os.sep + "multiprocessing" + os.sep


def is_own(filename):
    """Whether ``filename`` is a file of mpcompat (its demo scenarios are user code)."""
    path = os.path.abspath(filename) if filename else ""
    return path.startswith(_OWN) and not path.startswith(_DEMO)


def _entries(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def trimmed(tb, mechanics=False):
    """``tb`` without the frames of mpcompat's files (and, with ``mechanics``, of
    multiprocessing's: a library's error, its innermost frames trimmed already): a new chain,
    or ``tb`` itself when its innermost frame is mpcompat's (mpcompat raised) or none goes."""
    entries = list(_entries(tb))
    if not entries or (is_own(entries[-1].tb_frame.f_code.co_filename) and not mechanics):
        return tb
    kept = [e for e in entries if not is_own(e.tb_frame.f_code.co_filename) and not (
        mechanics and e.tb_frame.f_code.co_filename.startswith(_LIBRARY))]
    if len(kept) == len(entries):
        return tb
    chain = None
    for entry in reversed(kept):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def explained(exc):
    """Mark ``exc``, whose cause a note of mpcompat tells in full: the wrappers it passes
    through leave multiprocessing's frames out of its traceback too."""
    exc.__dict__[_EXPLAINED] = True


def drop_own_frames(exc):
    """In the ``except`` block of a wrapper of mpcompat, just before a bare ``raise``: leave
    mpcompat's frames out of the traceback of ``exc`` (see :func:`trimmed`). From Python 3.11 a
    bare ``raise`` keeps the traceback so set and adds no entry; before, it restores the one it
    caught, and the wrapper's frame stays: ``sys.excepthook`` leaves them out as it prints an
    uncaught error (:class:`_TrimmingHook`, installed here the first time)."""
    if sys.version_info >= (3, 11):
        exc.__traceback__ = trimmed(exc.__traceback__,
                                    getattr(exc, "__dict__", {}).get(_EXPLAINED, False))
    elif not isinstance(sys.excepthook, _TrimmingHook):
        sys.excepthook = _TrimmingHook(sys.excepthook)


class _TrimmingHook(object):
    """Before Python 3.11: a ``sys.excepthook`` that leaves mpcompat's frames out of an uncaught
    error (and its causes and contexts), then calls the hook it replaced."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, etype, value, tb):
        try:
            value.__traceback__ = tb
            _trim_chain(value)
            tb = value.__traceback__
        except Exception:  # the error is printed as it is
            pass
        return self.previous(etype, value, tb)


def _trim_chain(exc, seen=None):
    seen = set() if seen is None else seen
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = trimmed(exc.__traceback__,
                                    getattr(exc, "__dict__", {}).get(_EXPLAINED, False))
        _trim_chain(exc.__cause__, seen)
        exc = exc.__context__


def without_own_frames(func):
    """``func`` (a wrapper of mpcompat's), whose errors reach the user without mpcompat's frames
    (:func:`drop_own_frames`); ``functools.wraps`` it as ``func`` itself was."""
    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except BaseException as exc:
            drop_own_frames(exc)
            raise
    return call


def format_trimmed(exc):
    """The traceback of ``exc`` as text, as ``traceback.format_exception`` makes it, with
    mpcompat's frames left out (see :func:`trimmed`), its causes and contexts included. Imports
    ``traceback`` (as ``Process._bootstrap`` does where a process ends of an error): never in a
    Pool's helper thread."""
    import traceback
    _trim_chain(exc)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def innermost_user_frame(tb):
    """``(filename, line, function)`` of the innermost frame of ``tb`` outside mpcompat and
    multiprocessing, or None."""
    found = None
    for entry in _entries(tb):
        code = entry.tb_frame.f_code
        if not is_own(code.co_filename) and not code.co_filename.startswith(_LIBRARY):
            found = (code.co_filename, entry.tb_lineno, code.co_name)
    return found

