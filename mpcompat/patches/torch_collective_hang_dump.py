"""Patch ``torch.collective_hang_dump``: with ``MPCOMPAT_HANG_DUMP=SECONDS``, a collective that
lasts SECONDS makes every rank say, through the c10d store, where it is; the report names the
ranks that are not in it (``mpcompat.hang_dump.collectives``, patches.md).

The collectives of ``torch.distributed.distributed_c10d`` are wrapped, and so are the names
``torch.distributed`` re-exports (it copies them before the import hook sees
``distributed_c10d`` finish); ``init_process_group`` starts the rank's watcher thread once it
returns.
"""
import atexit
import os
import sys
from datetime import timedelta

from mpcompat.hang_dump import collectives
from mpcompat.patcher import Patcher

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
            collectives.start_watcher(_store_factory())
        return result
    return collectives.like_original(init_process_group, original)


def _stop_then_destroy(original):
    def destroy_process_group(*args, **kwargs):
        collectives.stop_watcher()
        return original(*args, **kwargs)
    return collectives.like_original(destroy_process_group, original)


def apply(module):
    """Wrap the collectives and ``init_process_group`` of ``module``
    (``torch.distributed.distributed_c10d``, or ``torch.distributed``, which re-exports them)."""
    collectives.switch_on()
    for name in COLLECTIVES + ("init_process_group", "destroy_process_group"):
        function = module.__dict__.get(name)
        if callable(function) and not getattr(function, "_mpcompat_watched", False):
            original = patcher.original(module, name)
            wrapper = (_init_then_watch(original) if name == "init_process_group" else
                       _stop_then_destroy(original) if name == "destroy_process_group" else
                       collectives.watched_collective(original, name))
            wrapper._mpcompat_watched = True
            patcher.replace(module, name, wrapper)


atexit.register(collectives.stop_watcher)  # a rank that never destroys its group


def revert(module):
    """Put the originals back where ours are in place."""
    patcher.restore(module)
