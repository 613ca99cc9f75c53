"""Patch ``multiprocessing.hang_dump``: a Pool/ThreadPool result waited for too long dumps the
stacks of this process and of the pool's worker processes (``MPCOMPAT_HANG_DUMP``; see
``mpcompat.hang_dump.watchdog``).

On ``multiprocessing.pool`` (plain functions; the classes keep their identity):
``ApplyResult.wait`` (``get``, ``MapResult`` too: each chunk that arrives is progress) and
``IMapIterator.next`` / ``__next__``: a call that may block is watched. The pool's worker
processes are asked for their stacks; ThreadPool workers are threads, in the process's own dump.
On ``multiprocessing.process`` (imported by every child, spawn and forkserver ones included):
the stack-dump handler is registered, so that the parent can ask for its stacks.
"""
from mpcompat.patcher import Patcher, Skip
from mpcompat.hang_dump import watchdog

NAME = "multiprocessing.hang_dump"
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


_RESULT = watchdog.WaitKind(_describe_result, _pool_workers,
                            lambda result: getattr(result, "_number_left", None))
_IMAP = watchdog.WaitKind(_describe_imap, _pool_workers)


def apply(module):
    """On ``multiprocessing.pool``: wrap the result waits; on ``multiprocessing.process``:
    register the stack-dump handler. "Not needed" when MPCOMPAT_HANG_DUMP is unset."""
    watchdog.require()
    if module.__name__ != "multiprocessing.pool":
        watchdog.arm_workers(NAME)
        return
    apply_result = module.__dict__.get("ApplyResult")
    imap = module.__dict__.get("IMapIterator")
    if not isinstance(apply_result, type) or not isinstance(imap, type):
        raise Skip("multiprocessing.pool has no ApplyResult or IMapIterator class")
    slots = [(apply_result, "wait", _RESULT, lambda result: result._event.is_set()),
             (imap, "next", _IMAP, lambda iterator: iterator._items),
             (imap, "__next__", _IMAP, lambda iterator: iterator._items)]
    for cls, name, _, _ in slots:
        if not callable(cls.__dict__.get(name)):
            raise Skip("%s.%s is not a function" % (cls.__name__, name))
    watchdog.arm_workers(NAME)
    for cls, name, kind, ready in slots:
        patcher.replace(cls, name, watchdog.watched_method(patcher.original(cls, name), kind,
                                                           ready))


def revert(module):
    """Put back the original functions where ours are still in place; on
    ``multiprocessing.process``, unregister the handler (unless another patch still wants it)."""
    if module.__name__ != "multiprocessing.pool":
        watchdog.disarm_workers(NAME)
    patcher.restore(module)
