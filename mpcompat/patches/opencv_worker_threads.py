"""Patch ``opencv.worker_threads``: OpenCV runs single-threaded in workers and forked children.

N DataLoader workers times OpenCV's N threads compete for N cores. As torch does for its own
threads, every forked child (an ``os.register_at_fork`` hook, registered once: ``revert`` only
disarms it) and every DataLoader worker (``mpcompat.workers.started``) runs
``cv2.setNumThreads(0)`` and ``cv2.ocl.setUseOpenCL(False)``. The main process keeps its own.
"""
import os
import sys

from mpcompat.patcher import Skip

# active: applied on cv2 (the fork hook acts only then); unhooked: the fork hook is still to be
# registered (popped: one atomic step, so two threads applying at once register it once).
_state = {"active": False, "unhooked": True}


def apply(module):
    """Arm the fork hook (registered once) and configure cv2 now inside a DataLoader worker."""
    if not callable(getattr(module, "setNumThreads", None)):
        raise Skip("cv2 has no setNumThreads()")
    _state["active"] = True
    from mpcompat.workers import started
    started.register(configure_worker)
    if hasattr(os, "register_at_fork") and _state.pop("unhooked", False):
        os.register_at_fork(after_in_child=configure_worker)
    if _in_dataloader_worker():
        single_thread(module)


def revert(module):
    """Disarm the fork hook and the worker callback; configured threads stay as they are."""
    _state["active"] = False
    from mpcompat.workers import started
    started.unregister(configure_worker)


def single_thread(cv2):
    """Make ``cv2`` single-threaded with OpenCL off; never raise."""
    for configure in (lambda: cv2.setNumThreads(0), lambda: cv2.ocl.setUseOpenCL(False)):
        try:
            configure()
        except Exception:  # one failing (no cv2.ocl) does not keep the other from running
            pass


def configure_worker():
    """In a DataLoader worker or a forked child: configure cv2 if imported and patch applied."""
    cv2 = sys.modules.get("cv2")
    if _state["active"] and cv2 is not None:
        single_thread(cv2)


def _in_dataloader_worker():
    try:  # no torch worker module, or not in a worker
        return sys.modules["torch.utils.data._utils.worker"].get_worker_info() is not None
    except Exception:
        return False
