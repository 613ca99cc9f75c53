"""Patch ``multiprocessing.stuck_waits``: a Pool/ThreadPool result waited for too long dumps
the stacks of this process and of the pool's worker processes (``MPCOMPAT_HANG_DUMP``).

Off unless ``MPCOMPAT_HANG_DUMP=SECONDS`` is set: long Pool tasks are common and legitimate,
and a stack dump there would be noise. When unset the patch is "not needed" and nothing is
wrapped. See ``mpcompat.workers.hang_watch`` for the watchdog and the dump.

On ``multiprocessing.pool`` (plain functions, ``functools.wraps``; the classes keep their
identity):
- ``ApplyResult.wait`` (``get`` calls it; ``MapResult`` inherits it): a wait that may block
  (result not ready, no timeout or one of SECONDS or more) is registered with the watchdog. For
  a ``MapResult`` (``map``, ``starmap``, ``map_async(...).get()``) each chunk that arrives is
  progress: a map whose chunks keep coming never dumps.
- ``IMapIterator.next`` / ``__next__`` (also ``imap_unordered``): a ``next`` that has no item
  ready is registered; each item ends that wait.
The pool's worker processes (``pool._pool``) are asked for their stacks; ThreadPool workers
are threads of this process and appear in its own dump.

On ``multiprocessing.process`` (imported by every multiprocessing child, spawn and forkserver
ones included): the stack-dump handler (faulthandler on SIGURG) is registered in this process,
so that its parent can ask for its stacks; forked children inherit it.
"""
import functools
import sys

from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

NAME = "multiprocessing.stuck_waits"
patcher = Patcher()


def _pool_text(pool):
    if pool is None:
        return "a pool"
    workers = getattr(pool, "_pool", None) or ()
    return "%s.%s with %d worker%s" % (type(pool).__module__, type(pool).__name__,
                                       len(workers), "" if len(workers) == 1 else "s")


def _describe_result(result):
    pool = _pool_text(getattr(result, "_pool", None))
    left = getattr(result, "_number_left", None)
    if left is not None:
        return ("the result of a map (MapResult job %s of %s; %d chunk%s still to come)"
                % (getattr(result, "_job", "?"), pool, left, "" if left == 1 else "s"))
    return "a result (ApplyResult job %s of %s)" % (getattr(result, "_job", "?"), pool)


def _describe_imap(iterator):
    how = "imap_unordered" if "Unordered" in type(iterator).__name__ else "imap"
    return "the next result of Pool.%s (job %s of %s; %d received so far)" % (
        how, getattr(iterator, "_job", "?"), _pool_text(getattr(iterator, "_pool", None)),
        getattr(iterator, "_index", 0))


def _pool_workers(result):
    pool = getattr(result, "_pool", None)
    return [("Pool worker %s" % p.name, p) for p in list(getattr(pool, "_pool", None) or ())]


def _map_progress(result):
    return getattr(result, "_number_left", None)


# What the dump says about each kind of wait (see mpcompat.workers.hang_watch.kind).
_RESULT = (_describe_result, _pool_workers, _map_progress)
_IMAP = (_describe_imap, _pool_workers, None)


def _wrap_wait(original, hang_watch):
    watched, short = hang_watch.call_watched, hang_watch.short

    @functools.wraps(original)
    def wait(self, timeout=None):
        if self._event.is_set() or (timeout is not None and short(timeout)):
            return original(self, timeout)
        return watched(self, _RESULT, original, self, timeout)
    return wait


def _wrap_next(original, hang_watch):
    watched, short = hang_watch.call_watched, hang_watch.short

    @functools.wraps(original)
    def next(self, timeout=None):
        if self._items or (timeout is not None and short(timeout)):
            return original(self, timeout)
        return watched(self, _IMAP, original, self, timeout)
    return next


def _slots(module):
    """(class, attribute name, wrapper factory) for each function the patch wraps."""
    apply_result = module.__dict__.get("ApplyResult")
    imap = module.__dict__.get("IMapIterator")
    if not isinstance(apply_result, type) or not isinstance(imap, type):
        raise Skip("multiprocessing.pool has no ApplyResult or IMapIterator class")
    return [(apply_result, "wait", _wrap_wait), (imap, "next", _wrap_next),
            (imap, "__next__", _wrap_next)]


def apply(module):
    """On ``multiprocessing.pool``: wrap the result waits; on ``multiprocessing.process``:
    register the stack-dump handler. "Not needed" when MPCOMPAT_HANG_DUMP is unset."""
    # Only called when MPCOMPAT_HANG_DUMP is set (the manager answers "not needed" otherwise,
    # before this module is even imported); require() checks the value.
    from mpcompat.workers import hang_watch
    hang_watch.require()
    if module.__name__ != "multiprocessing.pool":
        hang_watch.arm_workers(NAME)
        return
    slots = _slots(module)
    for cls, name, _ in slots:
        if not callable(cls.__dict__.get(name)):
            raise Skip("%s.%s is not a function" % (cls.__name__, name))
    hang_watch.arm_workers(NAME)
    for cls, name, factory in slots:
        patcher.replace(cls, name, factory(patcher.original(cls, name), hang_watch))


def revert(module):
    """Put back the original functions where ours are still in place; on
    ``multiprocessing.process``, unregister the handler (unless another patch still wants it)."""
    hang_watch = sys.modules.get("mpcompat.workers.hang_watch")
    if module.__name__ != "multiprocessing.pool":
        if hang_watch is not None:
            hang_watch.disarm_workers(NAME)
        return
    patcher.restore(module)
