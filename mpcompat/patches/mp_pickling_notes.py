"""Patch ``multiprocessing.pickling_notes``: pickling errors in multiprocessing say what failed.

``reduction.dump`` (a Process object for a new process) and ``ForkingPickler.dumps`` (every
message) re-raise a pickling error with a note naming each part that cannot be pickled
(``mpcompat.diagnose.notes``). ``dumps`` is on the hot path: the stock one is replaced by its
same three lines inside a ``try`` (no extra call); anything else there is wrapped.
"""
import functools
import io

from mpcompat.patching import Patcher
from mpcompat.patching import Skip

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
        start = file.tell() if type(file) is io.BytesIO else None
        try:
            result = original(obj, file, protocol)
        except Exception as exc:
            _report(exc, obj, module.ForkingPickler, protocol, "start")
            raise
        if start is not None and "_popen" in getattr(obj, "__dict__", ()):
            # A Process object for a spawn/forkserver start: its size (the DataLoader
            # dataset in its args) is read by mpcompat.workers.dataset_memory.
            obj.__dict__["_mpcompat_sent_bytes"] = file.tell() - start
        return result
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
