"""Patch ``torch.collective_watch``: with ``MPCOMPAT_HANG_DUMP=SECONDS``, a collective that
lasts SECONDS makes every rank say, through the c10d store, where it is; the report names the
ranks that are not in it (``mpcompat.workers.collective_watch``, patches.md).

The collectives of ``torch.distributed.distributed_c10d`` are wrapped, and so are the names
``torch.distributed`` re-exports (it copies them before the import hook sees
``distributed_c10d`` finish); ``init_process_group`` starts the rank's watcher thread once it
returns.
"""
import atexit
import os
import sys
from datetime import timedelta

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import NotNeeded
from mpcompat.workers import collective_watch

patcher = Patcher()
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "all_gather",
    "all_gather_into_tensor", "all_gather_coalesced", "_all_gather_base", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "all_gather_object",
    "gather_object", "broadcast_object_list", "scatter_object_list", "send", "recv")


def _store_factory():
    """A function that makes a new client of the job's TCPStore (``MASTER_ADDR:MASTER_PORT``,
    as torchrun and ``env://`` set them), for the watcher's blocking wait."""
    def make(timeout):
        env = os.environ
        return sys.modules["torch._C._distributed_c10d"].TCPStore(
            env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env["WORLD_SIZE"]), False,
            timedelta(seconds=timeout))
    return make


def _init_then_watch(original):
    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            collective_watch.start_watcher(_store_factory())
        return result
    return _like(init_process_group, original)


def _stop_then_destroy(original):
    def destroy_process_group(*args, **kwargs):
        collective_watch.stop_watcher()
        return original(*args, **kwargs)
    return _like(destroy_process_group, original)


def _like(wrapper, original):
    wrapper.__wrapped__ = original
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attr, getattr(original, attr, None))
    return wrapper


def apply(module):
    """Wrap the collectives and ``init_process_group`` of ``module``
    (``torch.distributed.distributed_c10d``, or ``torch.distributed``, which re-exports them)."""
    seconds = collective_watch.seconds_from_env()
    if seconds is None:
        raise NotNeeded("%s is not a positive number of seconds" % collective_watch.VAR)
    collective_watch._state.seconds = seconds
    for name in COLLECTIVES + ("init_process_group", "destroy_process_group"):
        function = module.__dict__.get(name)
        if callable(function) and not getattr(function, "_mpcompat_watched", False):
            original = patcher.original(module, name)
            wrapper = (_init_then_watch(original) if name == "init_process_group" else
                       _stop_then_destroy(original) if name == "destroy_process_group" else
                       collective_watch.watched(original, name))
            wrapper._mpcompat_watched = True
            patcher.replace(module, name, wrapper)


atexit.register(collective_watch.stop_watcher)  # a rank that never destroys its group


def revert(module):
    """Put the originals back where ours are in place."""
    patcher.restore(module)
