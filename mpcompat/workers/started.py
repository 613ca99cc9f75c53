"""Callbacks that patches register while applied (``opencv_worker_threads``), run at the start
of each DataLoader worker (``torch.dataloader_workers``), before the user's ``worker_init_fn``."""

# An ordered set: each change is one atomic dict operation, so threads that apply and revert at
# once need no lock (and a forked child inherits none held).
_callbacks = {}


def register(callback):
    """Run ``callback()`` at the start of every DataLoader worker (once, however often
    registered)."""
    _callbacks.setdefault(callback)


def unregister(callback):
    """Stop running ``callback`` in workers that start from now on."""
    _callbacks.pop(callback, None)


def run():
    """In a worker that starts: run each callback; one that raises does not stop the others."""
    for callback in tuple(_callbacks):
        try:
            callback()
        except Exception:
            pass
