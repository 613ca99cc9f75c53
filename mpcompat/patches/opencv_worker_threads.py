"""Patch ``opencv.worker_threads``: OpenCV runs single-threaded in workers and forked children.

OpenCV runs its parallel functions on a thread pool as wide as the machine, in every process
that uses it. In DataLoader workers that multiplies: N workers times N threads compete for N
cores, on top of the parallelism the workers already are. What torch does for its own threads
(``torch.set_num_threads(1)`` in each worker) is done here for OpenCV,
``cv2.setNumThreads(0)`` (then ``cv2.getNumThreads() == 1``) and ``cv2.ocl.setUseOpenCL(False)``,
in

- every forked child (``os.fork``: fork DataLoader workers, fork Pools, ...), through an
  ``os.register_at_fork(after_in_child=...)`` hook registered once, when cv2 is first
  imported (it cannot be unregistered: it checks a flag that ``revert`` clears);
- every DataLoader worker, whatever the start method: :func:`configure_worker` is registered
  with ``mpcompat.workers.started``, which ``torch.dataloader_workers`` runs in the worker
  before the user's ``worker_init_fn``, and a cv2 imported later inside a worker (in
  ``__getitem__``) is configured when it is imported.

The main process keeps its own setting; a ``worker_init_fn`` that sets its own count wins.
"""
import os
import sys

from mpcompat.patches import Skip

# active: applied on cv2 (the fork hook acts only then); hooked: the fork hook is registered.
_state = {"active": False, "hooked": False}


def apply(module):
    """Arm the fork hook (registered once) and configure cv2 now inside a DataLoader worker."""
    if not callable(getattr(module, "setNumThreads", None)):
        raise Skip("cv2 has no setNumThreads()")
    _state["active"] = True
    from mpcompat.workers import started
    started.register(configure_worker)
    if not _state["hooked"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=configure_worker)
        _state["hooked"] = True
    if _in_dataloader_worker():
        single_thread(module)


def revert(module):
    """Disarm the fork hook and the worker callback; threads already configured stay as they
    are."""
    _state["active"] = False
    from mpcompat.workers import started
    started.unregister(configure_worker)


def single_thread(cv2):
    """Make ``cv2`` single-threaded with OpenCL off; never raise."""
    try:
        cv2.setNumThreads(0)
    except Exception:
        pass
    try:
        cv2.ocl.setUseOpenCL(False)
    except Exception:
        pass


def configure_worker():
    """In a DataLoader worker, before its ``worker_init_fn``, and in a forked child: configure
    cv2 if it is imported and the patch is applied."""
    cv2 = sys.modules.get("cv2")
    if _state["active"] and cv2 is not None:
        single_thread(cv2)


def _in_dataloader_worker():
    worker = sys.modules.get("torch.utils.data._utils.worker")
    get_info = getattr(worker, "get_worker_info", None)
    try:
        return get_info is not None and get_info() is not None
    except Exception:
        return False
