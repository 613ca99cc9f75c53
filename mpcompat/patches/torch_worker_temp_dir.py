"""Patch ``torch.worker_temp_dir``: DataLoader workers keep their temporary files in their
parent's temporary directory, which the parent removes when it exits (patches.md).

A worker that sends a tensor through a file descriptor (torch's default sharing strategy)
starts multiprocessing's ``resource_sharer``, whose socket lives in the directory of
``multiprocessing.util.get_temp_dir()``. A worker makes its own ``pymp-*`` directory for it
and removes it when it exits normally; a worker killed (SIGKILL, the OOM killer) leaves it
behind. Made before the workers, the parent's directory is in the configuration each worker
copies (fork) or receives (spawn, forkserver), so they use it, and the parent removes it.
"""
import functools
import shutil  # noqa: F401  get_temp_dir imports them: here, not later (the fork rule)
import tempfile  # noqa: F401
from multiprocessing import util

from mpcompat.patcher import Patcher, Skip
from mpcompat.workers.user_frames import without_own_frames

patcher = Patcher()


def _sharing_temp_dir(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            util.get_temp_dir()  # the workers made next copy the parent's configuration
        except Exception:
            pass
        return original(self, *args, **kwargs)
    return without_own_frames(__init__)  # a worker that fails to start: the user's frames


def apply(module):
    """Wrap ``_MultiProcessingDataLoaderIter.__init__`` of ``module``
    (``torch.utils.data.dataloader``)."""
    cls = getattr(module, "_MultiProcessingDataLoaderIter", None)
    if not isinstance(cls, type) or "__init__" not in cls.__dict__:
        raise Skip("torch.utils.data.dataloader has no _MultiProcessingDataLoaderIter.__init__")
    patcher.replace(cls, "__init__", _sharing_temp_dir(patcher.original(cls, "__init__")))


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
