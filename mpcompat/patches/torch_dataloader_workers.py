"""Patch ``torch.dataloader_workers``: DataLoader workers never fail in silence (patches.md).

In the worker, ``_worker_loop`` (pickled by reference: a plain function) gives the result queue
an ``_on_queue_feeder_error`` that sends a batch's pickling error instead of dropping it
(pytorch#142884). In the main process, the "exited unexpectedly" error of
``_MultiProcessingDataLoaderIter._try_get_data`` gains how each dead worker ended (its pid, its
exit code or signal) and the error it recorded; so does the "is killed by signal" error of
torch's SIGCHLD handler (``signal_handling._error_if_any_worker_fails``, which the handler looks
up at each call) where it raises outside ``_try_get_data``: the handler runs wherever the main
thread is (the loop's body, ``_process_data``). Its ``__init__`` (``iter()``) starts the workers
with one reading of the OOM kill counters for all (``channel.batch``), marks them as
its workers, then keeps a sampler of their private memory (``mpcompat.workers.dataset_memory``),
which ``_try_get_data`` runs every few seconds (a ``time.monotonic()`` per batch otherwise): a
dataset that grows in every worker is named once.

What explains a failure (the explainer, the notes, how a worker ended) is loaded when one is
seen: in the worker's thread that hit it (its main thread, or the queue's feeder thread, which
pickles batches: a DataLoader worker is daemonic and starts no child of its own), or in the
main process's thread that iterates.

Patch ``torch.worker_temp_dir`` (:data:`worker_temp_dir`, its own row of the table, here because
it loads with the rest): DataLoader workers keep their temporary files in their parent's
temporary directory, which the parent removes when it exits. A worker that sends a tensor
through a file descriptor (torch's default sharing strategy) starts multiprocessing's
``resource_sharer``, whose socket lives in the directory of ``util.get_temp_dir()``; a worker
makes its own ``pymp-*`` directory for it and removes it when it exits normally, and a worker
killed (SIGKILL, the OOM killer) leaves it behind. Made before the workers, the parent's
directory is in the configuration each worker copies (fork) or receives (spawn, forkserver), so
they use it, and the parent removes it.
"""
import functools
import sys
import time
from multiprocessing import util
from types import SimpleNamespace

from torch._utils import ExceptionWrapper  # loaded with torch, which imports this module

from mpcompat.patcher import Patcher, Skip

WORKER = "torch.utils.data._utils.worker"
LOADER = "torch.utils.data.dataloader"
SIGNALS = "torch.utils.data._utils.signal_handling"  # imported with LOADER
_NOTED = "_mpcompat_workers_noted"
# In a worker's Process.__dict__ (iter()): its DataLoader's worker count and prefetch factor.
_LOADER_OF = "_mpcompat_dataloader"
patcher = Patcher()


def apply(module):
    """Replace ``_worker_loop`` (worker module), or wrap ``_MultiProcessingDataLoaderIter``'s
    ``__init__`` and ``_try_get_data`` and the SIGCHLD handler's check (dataloader module)."""
    if module.__name__ == WORKER:
        if not callable(module.__dict__.get("_worker_loop")):
            raise Skip("%s has no _worker_loop()" % WORKER)
        patcher.replace(module, "_worker_loop",
                        _make_worker_loop(patcher.original(module, "_worker_loop")))
    elif module.__name__ == LOADER:
        cls = getattr(module, "_MultiProcessingDataLoaderIter", None)
        if "_try_get_data" not in getattr(cls, "__dict__", {}) or \
                "__init__" not in getattr(cls, "__dict__", {}):
            raise Skip("%s has no _MultiProcessingDataLoaderIter.__init__ or _try_get_data"
                       % LOADER)
        for name, wrap in (("__init__", _starting_workers), ("_try_get_data", _try_get_data)):
            patcher.replace(cls, name, wrap(patcher.original(cls, name)))
        signals = sys.modules.get(SIGNALS)
        if callable(getattr(signals, "_error_if_any_worker_fails", None)):
            patcher.replace(signals, "_error_if_any_worker_fails", _naming_in_handler(
                patcher.original(signals, "_error_if_any_worker_fails")), target=LOADER)


def revert(module):
    """Put the originals back where ours are still in place."""
    patcher.restore(module)


# --- in the worker ----------------------------------------------------------------------------

def _make_worker_loop(original):
    code = original.__code__
    names = code.co_varnames[:code.co_argcount]  # not inspect.signature: every worker pays it

    @functools.wraps(original)
    def _worker_loop(*args, **kwargs):
        try:
            bound = dict(zip(names, args), **kwargs)
            queue = bound.get("data_queue")
            if hasattr(type(queue), "_on_queue_feeder_error") and hasattr(queue, "put"):
                # Read by Queue._start_thread at the first put (3.8-3.13): an instance
                # attribute set before it is what the feeder thread calls.
                queue._on_queue_feeder_error = functools.partial(
                    _feeder_error, queue, bound.get("worker_id"))
            # This worker's errors: those of a full /dev/shm carry what was measured.
            original.__globals__["ExceptionWrapper"] = _measuring_wrapper
            started = sys.modules.get("mpcompat.workers.started")  # callbacks registered
            if started is not None:
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
        from mpcompat.child_failures import exits  # an error, in the worker's main thread
        if exits.is_shm_error(exc_info[1]):
            wrapper.mpcompat_shm = (exits.failed_allocation(exc_info[2]), exits.usage())
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
    from multiprocessing.reduction import ForkingPickler
    from mpcompat.diagnose.notes import add_note, own_message
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
    import pickle
    from mpcompat.diagnose.notes import own_message
    message = own_message(exc)
    try:
        carrier = type(exc)(message)
        if str(carrier) == message:
            return carrier
    except Exception:
        pass
    return pickle.PicklingError("%s: %s" % (type(exc).__name__, message))


def _report(exc, idx, data, worker_id, pickler):
    from mpcompat.diagnose.notes import PREFIX, own_message
    from mpcompat.diagnose.walker import explain_parts
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

def _starting_workers(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        from mpcompat.child_failures import channel  # iter(), in the user's thread
        with channel.batch():
            original(self, *args, **kwargs)
        try:
            loader = {"workers": getattr(self, "_num_workers", None),
                      "prefetch_factor": getattr(self, "_prefetch_factor", None)}
            for worker in self._workers:
                worker.__dict__[_LOADER_OF] = loader
            from mpcompat.workers import dataset_memory
            dataset_memory.start(self)
        except Exception:  # never keep a DataLoader from iterating
            pass
    return __init__


def _try_get_data(original):
    """``_try_get_data``, whose "exited unexpectedly" error gains how each dead worker ended
    (torch's own message may say neither its exit code nor its signal) and their recorded
    errors (a plain function: wrapt is not loaded for it)."""
    @functools.wraps(original)
    def _try_get_data(self, *args, **kwargs):
        # torch's SIGCHLD handler raises its "is killed by signal" error wherever the main
        # thread is: the sampling runs inside the try, so that error is handled as torch's own.
        try:
            sampler = self.__dict__.get("_mpcompat_memory")
            if sampler is not None and time.monotonic() >= sampler.due:
                _sample(sampler)
            result = original(self, *args, **kwargs)
        except RuntimeError as exc:
            _name_dead_workers(exc, getattr(self, "_workers", ()))
            from mpcompat.workers.user_frames import drop_own_frames  # the user's thread
            drop_own_frames(exc)  # torch's error: no frame of this wrapper in its traceback
            raise
        item = result[1] if result[0] and type(result[1]) is tuple and len(result[1]) == 2 \
            else None
        if item is not None and type(item[1]) is ExceptionWrapper and "mpcompat_shm" in \
                item[1].__dict__:
            _add_shm_lines(item[1], self)
        return result
    return _try_get_data


def _sample(sampler):
    try:
        sys.modules["mpcompat.workers.dataset_memory"].sample(sampler)
    except Exception as exc:  # never break the user's loop, but let torch's SIGCHLD error by
        sampler.due = float("inf")
        if type(exc) is RuntimeError and str(exc).startswith("DataLoader worker"):
            raise


def _name_dead_workers(exc, workers, named_only=False):
    """The error ``exc`` that a worker's death raised in the main process: add how each dead
    DataLoader worker of ``workers`` (its Processes; with ``named_only``, those whose pid
    ``exc`` names) ended and what it recorded, once."""
    try:
        message = str(exc) if named_only else ""
        dead = [w for w in list(workers) if _LOADER_OF in w.__dict__ and (
            "(pid %d)" % w.pid in message or not named_only) and w.exitcode]
        if dead and not exc.__dict__.get(_NOTED):
            from mpcompat.child_failures import channel, exits
            from mpcompat.diagnose.notes import PREFIX, add_note
            exc.__dict__[_NOTED] = True
            lines = []
            for w in dead:
                lines.append("DataLoader worker (pid %d) ended: %s." % (
                    w.pid, exits.describe_exit(w.exitcode, w.pid)))
                lines += exits.dead_lines(w.exitcode, None, pid=w.pid, shm=w.__dict__[_LOADER_OF])
            add_note(exc, PREFIX + "\n".join(lines))
            note = channel.note_for([w.pid for w in dead], "DataLoader worker")
            if note:
                add_note(exc, note)
    except Exception:
        pass


def _naming_in_handler(original):
    """torch's ``_error_if_any_worker_fails`` (C), whose error names the worker it names,
    unless it interrupted torch's ``_try_get_data``: that error leaves through our wrapper of
    it (torch turns it into "exited unexpectedly"), which names the dead workers."""
    @functools.wraps(original)
    def _error_if_any_worker_fails():
        try:
            original()
        except RuntimeError as exc:
            frame = sys._getframe(1)
            while frame is not None and not (frame.f_code.co_name == "_try_get_data" and
                                             frame.f_globals.get("__name__") == LOADER):
                frame = frame.f_back
            if frame is None:
                _name_dead_workers(exc, sys.modules["multiprocessing.process"]._children, True)
            from mpcompat.workers.user_frames import drop_own_frames, explained
            # Its cause told (torch's message names the worker and its signal): its traceback
            # loses this frame, its innermost, which only called torch's C function.
            explained(exc)
            drop_own_frames(exc)
            raise
    return _error_if_any_worker_fails


def _add_shm_lines(wrapper, loader_iter):
    """A worker's error of a full /dev/shm (see :func:`_measuring_wrapper`): its message,
    which the main process raises, gains the measured facts and the fix."""
    try:
        from mpcompat.child_failures.exits import shm_lines
        from mpcompat.diagnose.notes import PREFIX
        batch_bytes, measured = wrapper.__dict__.pop("mpcompat_shm")
        lines = shm_lines(
            getattr(loader_iter, "_num_workers", None),
            getattr(loader_iter, "_prefetch_factor", None), batch_bytes, measured)
        if lines:
            wrapper.exc_msg = wrapper.exc_msg.rstrip("\n") + "\n\n" + PREFIX + "\n".join(
                lines) + "\n"
    except Exception:
        pass


# --- patch torch.worker_temp_dir ---------------------------------------------------------------

temp_dir_patcher = Patcher()


def _sharing_temp_dir(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            util.get_temp_dir()  # the workers made next copy the parent's configuration
        except Exception:
            pass
        try:
            return original(self, *args, **kwargs)
        except BaseException as exc:  # a worker that fails to start: the user's frames
            from mpcompat.workers.user_frames import drop_own_frames
            drop_own_frames(exc)
            raise
    return __init__


def _apply_temp_dir(module):
    """Wrap ``_MultiProcessingDataLoaderIter.__init__`` of ``module``
    (``torch.utils.data.dataloader``)."""
    import shutil  # noqa: F401  get_temp_dir imports them: here, not later (the fork rule)
    import tempfile  # noqa: F401
    cls = getattr(module, "_MultiProcessingDataLoaderIter", None)
    if not isinstance(cls, type) or "__init__" not in cls.__dict__:
        raise Skip("torch.utils.data.dataloader has no _MultiProcessingDataLoaderIter.__init__")
    temp_dir_patcher.replace(cls, "__init__",
                             _sharing_temp_dir(temp_dir_patcher.original(cls, "__init__")))


worker_temp_dir = SimpleNamespace(apply=_apply_temp_dir, revert=temp_dir_patcher.restore)
