"""Datasets and functions for tests/dataloader_workers, importable by DataLoader workers.

Importing this module imports torch, never cv2: a dataset imports cv2 in ``__getitem__``, so
that a script decides whether cv2 is imported before the workers start (it imports cv2 itself)
or first inside a worker (it does not).
"""
import os
import signal
import threading
import time

import torch.utils.data as data

PATCHED_LOOP = "_mpcompat_dataloader_workers"


class LockSamples(data.Dataset):
    """Each sample holds a lock, which cannot be pickled: ``{"x": i, "lock": Lock()}``."""

    def __init__(self, n=4):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return {"x": index, "lock": threading.Lock()}


class RaisesLocalError(data.Dataset):
    """Raises an exception whose class is local, so torch cannot send it to the main process."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        class ShapeError(ValueError):
            pass
        raise ShapeError("sample %d has the wrong shape" % index)


class EndsAtItem3(data.Dataset):
    """Item 3 ends the worker that loads it, a second after writing the worker's pid to
    ``pid_file``: ``how`` is "exit3" (``os._exit(3)``), "outside" (it waits to be killed by
    another process) or a signal it sends itself ("SIGKILL", "SIGSEGV"). The second lets the
    main process wait for item 3, as it does when a worker dies in earnest."""

    def __init__(self, how, pid_file):
        self.how, self.pid_file = how, pid_file

    def __len__(self):
        return 6

    def __getitem__(self, index):
        if index == 3:
            with open(self.pid_file + ".new", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(self.pid_file + ".new", self.pid_file)  # whole, for the process reading
            time.sleep(1)
            if self.how == "exit3":
                os._exit(3)
            if self.how != "outside":
                os.kill(os.getpid(), getattr(signal, self.how))
            time.sleep(60)
        return index


class OpenCVThreads(data.Dataset):
    """Each sample tells how OpenCV is set up in the worker that made it.

    ``{"worker": id, "pid": pid, "threads": cv2.getNumThreads(), "opencl": cv2.ocl.useOpenCL(),
    "patched_loop": whether the worker runs mpcompat's _worker_loop}``.
    """

    def __init__(self, n=4):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        import cv2
        from torch.utils.data._utils import worker
        info = data.get_worker_info()
        return {"worker": info.id, "pid": os.getpid(), "threads": cv2.getNumThreads(),
                "opencl": bool(cv2.ocl.useOpenCL()),
                "patched_loop": bool(getattr(worker._worker_loop, PATCHED_LOOP, False))}


def two_threads_in_worker_1(worker_id):
    """A ``worker_init_fn`` that gives worker 1 two OpenCV threads (and leaves worker 0 be)."""
    if worker_id == 1:
        import cv2
        cv2.setNumThreads(2)


def as_list(samples):
    """A ``collate_fn`` that keeps the samples as they are, in a list."""
    return list(samples)
