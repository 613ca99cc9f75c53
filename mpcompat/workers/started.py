"""Callbacks that patches register while applied (``opencv_worker_threads``), run at the start
of each DataLoader worker (``torch.dataloader_workers``), before the user's ``worker_init_fn``."""

_callbacks = []


def register(callback):
    """Run ``callback()`` at the start of every DataLoader worker (once, however often
    registered)."""
    if callback not in _callbacks:
        _callbacks.append(callback)


def unregister(callback):
    """Stop running ``callback`` in workers that start from now on."""
    if callback in _callbacks:
        _callbacks.remove(callback)


def run():
    """In a worker that starts: run each callback; one that raises does not stop the others."""
    for callback in list(_callbacks):
        try:
            callback()
        except Exception:
            pass
