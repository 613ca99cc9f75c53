"""Patch ``multiprocessing.pickling_notes``: pickling errors in multiprocessing say what failed.

Two places pickle for multiprocessing, and both get a hook that does nothing unless pickling
raises; then the error gains a note with the path, type and hint of each part that cannot be
pickled (see ``mpcompat.diagnose.notes``) and is re-raised unchanged otherwise:

- ``multiprocessing.reduction.dump``: popen_spawn_posix, popen_forkserver and
  popen_spawn_win32 call it (as ``reduction.dump``) to pickle the Process object for a new
  process: Process.start, Pool and ProcessPoolExecutor workers, DataLoader workers,
  ``torch.multiprocessing.spawn``.
- ``ForkingPickler.dumps``: Connection.send and the Queue feeder thread call it (looked up on
  the class at each call): Pool tasks, ProcessPoolExecutor call items, Queue.put, Pipe.send.

``ForkingPickler.dumps`` is on the hot path of every message, so the stock implementation (the
function multiprocessing.reduction defines, wrapping nothing) is replaced by the same three
lines inside a ``try`` (no extra call); anything else is wrapped.
"""
import functools
import io

from mpcompat.patching.patcher import Patcher
from mpcompat.patches import Skip

patcher = Patcher()


def _report(exc, obj, pickler, protocol, where):
    try:
        from mpcompat.diagnose.notes import pickling_failed
        pickling_failed(exc, obj, pickler, protocol, where)
    except Exception:
        pass


def _wrap_dump(original, module):
    @functools.wraps(original)
    def dump(obj, file, protocol=None):
        try:
            return original(obj, file, protocol)
        except Exception as exc:
            _report(exc, obj, module.ForkingPickler, protocol, "start")
            raise
    return dump


def _make_dumps(original, module):
    func = original.__func__
    name = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    if name == (module.__name__, "ForkingPickler.dumps") and not hasattr(func, "__wrapped__"):
        def dumps(cls, obj, protocol=None):
            buf = io.BytesIO()
            try:
                cls(buf, protocol).dump(obj)
            except Exception as exc:
                _report(exc, obj, cls, protocol, "send")
                raise
            return buf.getbuffer()
    else:
        def dumps(cls, obj, protocol=None):
            try:
                return func(cls, obj, protocol)
            except Exception as exc:
                _report(exc, obj, cls, protocol, "send")
                raise
    return classmethod(functools.wraps(func)(dumps))


def apply(module):
    """Hook ``module.dump`` and ``module.ForkingPickler.dumps`` (``multiprocessing.reduction``)."""
    pickler = module.__dict__.get("ForkingPickler")
    if not callable(module.__dict__.get("dump")) or \
            not isinstance(getattr(pickler, "__dict__", {}).get("dumps"), classmethod):
        raise Skip("multiprocessing.reduction has no dump() or ForkingPickler.dumps")
    patcher.replace(module, "dump", _wrap_dump(patcher.original(module, "dump"), module))
    patcher.replace(pickler, "dumps", _make_dumps(patcher.original(pickler, "dumps"), module))


def revert(module):
    """Put back the original ``dump`` and ``ForkingPickler.dumps`` where ours are in place."""
    patcher.restore(module)
