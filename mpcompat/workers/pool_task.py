"""The task a Pool worker's thread runs: set by the ``multiprocessing.pool_workers`` patch as the
worker takes each task, read by the pickling notes when the task's result cannot be sent."""
import threading


class _PoolTask(threading.local):
    """``func``: in a Pool worker, the function of the task it runs; None elsewhere."""
    func = None


current = _PoolTask()
