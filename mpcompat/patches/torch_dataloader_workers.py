"""Patch ``torch.dataloader_workers``: DataLoader workers never fail in silence (patches.md).

In the worker, ``_worker_loop`` (pickled by reference: a plain function) gives the result queue
an ``_on_queue_feeder_error`` that sends a batch's pickling error instead of dropping it
(pytorch#142884). In the main process, the "exited unexpectedly" error of
``_MultiProcessingDataLoaderIter._try_get_data`` gains how each dead worker ended (its pid, its
exit code or signal) and the error it recorded.

Everything is imported here, never later: the worker's feeder thread must not import (the fork
rule), and this module is imported only with torch (``torch._utils`` is loaded by then).
"""
import functools
import inspect
import pickle
import sys
from multiprocessing.reduction import ForkingPickler

from torch._utils import ExceptionWrapper

from mpcompat.diagnose.notes import PREFIX, add_note, own_message
from mpcompat.diagnose.walker import explain_parts
from mpcompat.patching.spec import Skip
from mpcompat.patching.patcher import Patcher
from mpcompat.child_failures import channel, shared_memory
from mpcompat.workers import started
from mpcompat.child_failures.exits import dead_lines, describe_exit

WORKER = "torch.utils.data._utils.worker"
LOADER = "torch.utils.data.dataloader"
_NOTED = "_mpcompat_workers_noted"
patcher = Patcher()


def apply(module):
    """Replace ``_worker_loop`` (worker module) or wrap ``_try_get_data`` (dataloader module)."""
    if module.__name__ == WORKER:
        if not callable(module.__dict__.get("_worker_loop")):
            raise Skip("%s has no _worker_loop()" % WORKER)
        patcher.replace(module, "_worker_loop",
                        _make_worker_loop(patcher.original(module, "_worker_loop")))
    elif module.__name__ == LOADER:
        cls = getattr(module, "_MultiProcessingDataLoaderIter", None)
        if "_try_get_data" not in getattr(cls, "__dict__", {}):
            raise Skip("%s has no _MultiProcessingDataLoaderIter._try_get_data" % LOADER)
        patcher.wrap(cls, "_try_get_data", _try_get_data_wrapper)


def revert(module):
    """Put the originals back where ours are still in place."""
    patcher.restore(module)


# --- in the worker ----------------------------------------------------------------------------

def _make_worker_loop(original):
    @functools.wraps(original)
    def _worker_loop(*args, **kwargs):
        try:
            bound = inspect.signature(original).bind(*args, **kwargs).arguments
            queue = bound.get("data_queue")
            if hasattr(type(queue), "_on_queue_feeder_error") and hasattr(queue, "put"):
                # Read by Queue._start_thread at the first put (3.8-3.13): an instance
                # attribute set before it is what the feeder thread calls.
                queue._on_queue_feeder_error = functools.partial(
                    _feeder_error, queue, bound.get("worker_id"))
            # This worker's errors: those of a full /dev/shm carry what was measured.
            original.__globals__["ExceptionWrapper"] = _measuring_wrapper
            started.run()
        except Exception:  # never keep a worker from running
            pass
        return original(*args, **kwargs)
    _worker_loop._mpcompat_dataloader_workers = True  # what tests look for in a worker
    return _worker_loop


def _measuring_wrapper(exc_info=None, where="in background"):
    """``ExceptionWrapper(exc_info, where)`` for the worker loop; one for torch's "unable to
    allocate shared memory ... No space left on device" also carries ``mpcompat_shm``: the
    bytes asked for and /dev/shm's (size, used) at once (the main process adds the lines)."""
    exc_info = exc_info or sys.exc_info()
    wrapper = ExceptionWrapper(exc_info, where)
    try:
        if shared_memory.is_shm_error(exc_info[1]):
            wrapper.mpcompat_shm = (shared_memory.failed_allocation(exc_info[2]),
                                    shared_memory.usage())
    except Exception:
        pass
    return wrapper


def _feeder_error(queue, worker_id, exc, obj):
    """The feeder thread failed to pickle ``obj``: send an error in place of the batch. (The
    feeder released the queue's locks and semaphore slot first: putting here is safe.)"""
    try:
        if type(obj) is tuple and len(obj) == 2 and type(obj[0]) is int:
            queue.put((obj[0], _error_for(exc, obj[0], obj[1], worker_id)), False)
            return
    except Exception:
        pass
    type(queue)._on_queue_feeder_error(exc, obj)


def _error_for(exc, idx, data, worker_id):
    """An ExceptionWrapper that torch's reraise() turns into the error, with the report."""
    where = "in DataLoader worker process %s" % worker_id
    if isinstance(data, ExceptionWrapper):  # an error whose class cannot be pickled
        text = ("mpcompat: the worker's error, %s, could not be sent to the main process "
                "(%s: %s); its traceback in the worker:\n%s" % (
                    getattr(data.exc_type, "__qualname__", data.exc_type),
                    type(exc).__name__, own_message(exc), getattr(data, "exc_msg", "").rstrip()))
    else:
        carrier = _carrier(exc)
        add_note(carrier, _report(exc, idx, data, worker_id, ForkingPickler))
        wrapper = ExceptionWrapper((type(carrier), carrier, None), where)
        try:
            ForkingPickler.dumps(wrapper)
            return wrapper
        except Exception:  # the error's class cannot reach the main process: keep its text
            text = "%s: %s" % (type(carrier).__name__, str(carrier))
    return ExceptionWrapper((RuntimeError, RuntimeError(text), None), where)


def _carrier(exc):
    """A new exception of ``exc``'s type with its own message (mpcompat's notes left out)."""
    message = own_message(exc)
    try:
        carrier = type(exc)(message)
        if str(carrier) == message:
            return carrier
    except Exception:
        pass
    return pickle.PicklingError("%s: %s" % (type(exc).__name__, message))


def _report(exc, idx, data, worker_id, pickler):
    header = ("DataLoader worker process %s could not send batch %d of this epoch (counting "
              "from 0) to the main process: pickling it failed, and without mpcompat the main "
              "process would wait for it forever. Everything __getitem__ (and collate_fn) "
              "returns must be picklable; 'batch' is what the DataLoader yields for that step "
              "(one sample when batch_size=None). What cannot be pickled, and why:"
              % (worker_id, idx))
    try:
        report = explain_parts([("batch", data)], name="batch", pickler=pickler, error=exc,
                               check_main=False)
        if not report.ok:
            return PREFIX + report.format(header)
    except Exception:
        pass
    return PREFIX + header.rsplit(" What", 1)[0] + " (%s: %s)" % (type(exc).__name__,
                                                                  own_message(exc))


# --- in the main process ----------------------------------------------------------------------

def _try_get_data_wrapper(wrapped, instance, args, kwargs):
    """Call ``_try_get_data``; its "exited unexpectedly" error gains how each dead worker ended
    (torch's own message may say neither its exit code nor its signal) and their recorded
    errors."""
    try:
        result = wrapped(*args, **kwargs)
    except RuntimeError as exc:
        try:
            dead = [w for w in list(getattr(instance, "_workers", ())) if w.exitcode]
            if dead and not exc.__dict__.get(_NOTED):
                exc.__dict__[_NOTED] = True
                lines = []
                for w in dead:
                    lines.append("DataLoader worker (pid %d) ended: %s." % (
                        w.pid, describe_exit(w.exitcode, w.pid)))
                    lines += dead_lines(w.exitcode, None, pid=w.pid, shm={
                        "workers": getattr(instance, "_num_workers", None),
                        "prefetch_factor": getattr(instance, "_prefetch_factor", None)})
                add_note(exc, PREFIX + "\n".join(lines))
                note = channel.note_for([w.pid for w in dead], "DataLoader worker")
                if note:
                    add_note(exc, note)
        except Exception:
            pass
        from mpcompat.workers.user_frames import drop_own_frames  # the user's thread
        drop_own_frames(exc)  # torch's error: no frame of this wrapper in its traceback
        raise
    item = result[1] if result[0] and type(result[1]) is tuple and len(result[1]) == 2 else None
    if item is not None and type(item[1]) is ExceptionWrapper and "mpcompat_shm" in \
            item[1].__dict__:
        _add_shm_lines(item[1], instance)
    return result


def _add_shm_lines(wrapper, loader_iter):
    """A worker's error of a full /dev/shm (see :func:`_measuring_wrapper`): its message,
    which the main process raises, gains the measured facts and the fix."""
    try:
        batch_bytes, measured = wrapper.__dict__.pop("mpcompat_shm")
        lines = shared_memory.shm_lines(
            getattr(loader_iter, "_num_workers", None),
            getattr(loader_iter, "_prefetch_factor", None), batch_bytes, measured)
        if lines:
            wrapper.exc_msg = wrapper.exc_msg.rstrip("\n") + "\n\n" + PREFIX + "\n".join(
                lines) + "\n"
    except Exception:
        pass
