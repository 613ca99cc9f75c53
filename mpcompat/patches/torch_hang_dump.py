"""Patch ``torch.hang_dump``: a DataLoader batch or a ``torch.multiprocessing.spawn`` join
waited for too long dumps the stacks of this process and of its workers
(``MPCOMPAT_HANG_DUMP``; see ``mpcompat.hang_dump.watchdog``).

Wrapped in place with ``wrapt.FunctionWrapper`` (the classes keep their identity):
``_MultiProcessingDataLoaderIter._get_data`` (one call per batch: a batch arriving ends the
wait; workers ``self._workers``; a loader ``timeout`` shorter than SECONDS is not watched) and
``ProcessContext.join`` (``spawn(join=True)`` calls it until every process has exited; each
call ends when one exits; workers ``self.processes``).
"""
from mpcompat.hang_dump import watchdog
from mpcompat.workers.user_frames import drop_own_frames
from mpcompat.patcher import Patcher, Skip

NAME = "torch.hang_dump"
patcher = Patcher()


def _describe_batch(it):
    try:
        length = len(it)
    except Exception:
        length = "?"
    return "a batch from a DataLoader (batch %s of %s; %d worker processes; dataset %s)" % (
        getattr(it, "_rcvd_idx", "?"), length, len(getattr(it, "_workers", None) or ()),
        type(getattr(it, "_dataset", None)).__name__)


def _loader_workers(it):
    return [("DataLoader worker %d" % i, w)
            for i, w in enumerate(list(getattr(it, "_workers", None) or ()))]


def _describe_join(context):
    processes = getattr(context, "processes", None) or ()
    left = len(getattr(context, "sentinels", None) or ())
    return ("torch.multiprocessing.spawn's processes to exit (ProcessContext.join: %d of %d "
            "still running)" % (left, len(processes)))


def _spawn_workers(context):
    return [("spawn process %d" % i, p)
            for i, p in enumerate(list(getattr(context, "processes", None) or ()))]


_BATCH = watchdog.WaitKind(_describe_batch, _loader_workers)
_JOIN = watchdog.WaitKind(_describe_join, _spawn_workers)


def _watching(kind, timeout_of):
    """A wrapt wrapper: the call is watched unless its timeout is shorter than SECONDS."""
    def wrapper(wrapped, instance, args, kwargs):
        try:
            if watchdog.short_timeout(timeout_of(instance, args, kwargs)):
                return wrapped(*args, **kwargs)
            return watchdog.call_watched(instance, kind, wrapped, *args, **kwargs)
        except BaseException as exc:
            drop_own_frames(exc)  # a worker's error, raised again here: the user's
            raise
    return wrapper


_SLOTS = {  # a loader's timeout 0 means none
    "torch.utils.data.dataloader": ("_MultiProcessingDataLoaderIter", "_get_data", _watching(
        _BATCH, lambda it, args, kwargs: getattr(it, "_timeout", 0) or None)),
    "torch.multiprocessing.spawn": ("ProcessContext", "join", _watching(
        _JOIN, lambda context, args, kwargs: args[0] if args else kwargs.get("timeout"))),
}


def apply(module):
    """Wrap the wait of ``module`` (a DataLoader iterator's ``_get_data`` or
    ``ProcessContext.join``). "Not needed" when MPCOMPAT_HANG_DUMP is unset."""
    watchdog.require()
    slot = _SLOTS.get(module.__name__)
    if slot is None:
        raise Skip("no hang-dump hook for %s" % module.__name__)
    cls_name, name, wrapper = slot
    cls = module.__dict__.get(cls_name)
    if not callable(getattr(cls, "__dict__", {}).get(name)):
        raise Skip("%s has no %s.%s" % (module.__name__, cls_name, name))
    watchdog.arm_workers(NAME)
    patcher.wrap(cls, name, wrapper)


def revert(module):
    """Put back the original method of each class patched in ``module`` where ours is still in
    place (a wrapper someone put on top of ours since is left alone)."""
    watchdog.disarm_workers(NAME)
    patcher.restore(module)
