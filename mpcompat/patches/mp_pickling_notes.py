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

``ForkingPickler.dumps`` is on the hot path of every message, so the stock implementation is
replaced by the same three lines inside a ``try`` (no extra call); anything else is wrapped.
"""
import functools
import io

from mpcompat.patches import Skip

_MARK = "_mpcompat_pickling_notes"


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
    setattr(dump, _MARK, True)
    return dump


def _is_stock(func):
    code = getattr(func, "__code__", None)
    return (getattr(func, "__module__", None) == "multiprocessing.reduction"
            and getattr(func, "__qualname__", None) == "ForkingPickler.dumps"
            and code is not None and code.co_names == ("io", "BytesIO", "dump", "getbuffer"))


def _make_dumps(original):
    func = original.__func__
    if _is_stock(func):
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
    functools.update_wrapper(dumps, func)
    setattr(dumps, _MARK, True)
    dumps._mpcompat_original = original
    return classmethod(dumps)


def apply(module):
    """Hook ``module.dump`` and ``module.ForkingPickler.dumps`` (``multiprocessing.reduction``)."""
    dump = module.__dict__.get("dump")
    pickler = module.__dict__.get("ForkingPickler")
    dumps = pickler.__dict__.get("dumps") if isinstance(pickler, type) else None
    if not callable(dump) or not isinstance(dumps, classmethod):
        raise Skip("multiprocessing.reduction has no dump() or ForkingPickler.dumps")
    if not getattr(dump, _MARK, False):
        module.dump = _wrap_dump(dump, module)
    if not getattr(dumps.__func__, _MARK, False):
        pickler.dumps = _make_dumps(dumps)


def revert(module):
    """Put back the original ``dump`` and ``ForkingPickler.dumps`` where ours are in place."""
    dump = module.__dict__.get("dump")
    if getattr(dump, _MARK, False):
        module.dump = dump.__wrapped__
    pickler = module.__dict__.get("ForkingPickler")
    dumps = pickler.__dict__.get("dumps") if isinstance(pickler, type) else None
    if isinstance(dumps, classmethod) and getattr(dumps.__func__, _MARK, False):
        pickler.dumps = dumps.__func__._mpcompat_original
