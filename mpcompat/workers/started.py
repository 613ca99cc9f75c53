"""What runs at the start of each DataLoader worker, before the user's ``worker_init_fn``.

A patch that configures workers registers a callback while it is applied (OpenCV's thread
settings, ``mpcompat.patches.opencv_worker_threads``); ``torch.dataloader_workers`` runs the
callbacks in each worker. Registering one costs nothing until a worker starts.
"""

_callbacks = []


def register(callback):
    """Run ``callback()`` at the start of every DataLoader worker (once, however often it is
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
