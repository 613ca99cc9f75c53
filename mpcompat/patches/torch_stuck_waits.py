"""Patch ``torch.stuck_waits``: a DataLoader batch or a ``torch.multiprocessing.spawn`` join
waited for too long dumps the stacks of this process and of its workers
(``MPCOMPAT_HANG_DUMP``).

Off unless ``MPCOMPAT_HANG_DUMP=SECONDS`` is set: a spawn join lasts a whole training run and
a slow dataset can take long per batch, so a stack dump would be noise by default. When unset
the patch is "not needed" and nothing is wrapped. See ``mpcompat.workers.hang_watch`` for the watchdog
and the dump.

Two library methods are wrapped in place with ``wrapt.FunctionWrapper`` (the classes keep
their identity; ``__wrapped__`` is the original):
- ``_MultiProcessingDataLoaderIter._get_data`` (``torch.utils.data.dataloader``): one call
  per batch received, registered with the watchdog; a batch arriving ends the wait, so a
  loader whose batches keep coming never dumps. Workers asked for their stacks:
  ``self._workers``. A loader ``timeout`` shorter than SECONDS is not watched.
- ``ProcessContext.join`` (``torch.multiprocessing.spawn``): ``spawn(join=True)`` calls it in a
  loop until every process has exited; each call ends when a process exits (progress).
  Workers: ``self.processes``.
"""
from mpcompat.workers import hang_watch
from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

NAME = "torch.stuck_waits"
patcher = Patcher()


def _describe_batch(it):
    workers = getattr(it, "_workers", None) or ()
    return "a batch from a DataLoader (batch %s of %s; %d worker processes; dataset %s)" % (
        getattr(it, "_rcvd_idx", "?"), _length(it), len(workers),
        type(getattr(it, "_dataset", None)).__name__)


def _length(it):
    try:
        return len(it)
    except Exception:
        return "?"


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


# What the dump says about each kind of wait (see mpcompat.workers.hang_watch.kind).
_BATCH = hang_watch.kind(_describe_batch, _loader_workers)
_JOIN = hang_watch.kind(_describe_join, _spawn_workers)


def _get_data(wrapped, instance, args, kwargs):
    """Around ``_get_data``: the wait for one batch is watched."""
    timeout = getattr(instance, "_timeout", 0)
    if timeout and timeout > 0 and hang_watch.short(timeout):
        return wrapped(*args, **kwargs)
    return hang_watch.call_watched(instance, _BATCH, wrapped, *args, **kwargs)


def _join(wrapped, instance, args, kwargs):
    """Around ``ProcessContext.join``: the wait for the next process to exit is watched."""
    timeout = args[0] if args else kwargs.get("timeout")
    if timeout is not None and hang_watch.short(timeout):
        return wrapped(*args, **kwargs)
    return hang_watch.call_watched(instance, _JOIN, wrapped, *args, **kwargs)


_SLOTS = {
    "torch.utils.data.dataloader": ("_MultiProcessingDataLoaderIter", "_get_data", _get_data),
    "torch.multiprocessing.spawn": ("ProcessContext", "join", _join),
}


def apply(module):
    """Wrap the wait of ``module`` (a DataLoader iterator's ``_get_data`` or
    ``ProcessContext.join``). "Not needed" when MPCOMPAT_HANG_DUMP is unset."""
    hang_watch.require()
    slot = _SLOTS.get(module.__name__)
    if slot is None:
        raise Skip("no stuck-wait hook for %s" % module.__name__)
    cls_name, name, wrapper = slot
    cls = module.__dict__.get(cls_name)
    if not callable(getattr(cls, "__dict__", {}).get(name)):
        raise Skip("%s has no %s.%s" % (module.__name__, cls_name, name))
    hang_watch.arm_workers(NAME)
    patcher.wrap(cls, name, wrapper)


def revert(module):
    """Put back the original method of each class patched in ``module`` where ours is still in
    place (a wrapper someone put on top of ours since is left alone)."""
    hang_watch.disarm_workers(NAME)
    patcher.restore(module)
