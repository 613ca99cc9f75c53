"""The reducer registry (mpcompat's entries in ``copyreg.dispatch_table``, which every pickler,
``ForkingPickler``, ``torch.save`` and ``copy`` consult; it remembers the entry copyreg held
before, for ``unregister`` to put back) and the built-in reducers that activation registers
there (``BUILTIN_REDUCERS``).

- The six dict views, which no CPython version pickles. A keys view ships its keys, a values
  view its values, an items view a copy of the mapping: nothing else of the dict (cloudpickle's
  choice too). :mod:`mpcompat.rebuild_views` rebuilds them on a fresh dict of the same kind.
- Module objects: an importable module pickles as its name. mmcv before 1.4.8 keeps the modules
  a config file imports inside ``Config``, datasets sometimes keep one as an attribute; the
  standard library refuses both with ``cannot pickle 'module' object``.

Loaded when copyreg is first imported (nothing can pickle before); imports only built-in
modules. copyreg is imported on first use, not with this module: activation registers the
built-in reducers only once copyreg is imported, and its import hook may call back meanwhile.
"""
import os
import sys
from _thread import RLock

from mpcompat import rebuild_views

try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict

__all__ = ["register", "unregister", "registered", "registering", "reducer"]

_MISSING = object()
_MappingProxyType = type(type.__dict__)  # not importing types (start-up time)
_locks = {}  # pid -> the registry's lock in that process


def _lock():
    """This process's lock: ``activation.process_lock``'s one line, here since activation
    imports this module (a forked child never waits for a lock its parent's thread held)."""
    return _locks.get(os.getpid()) or _locks.setdefault(os.getpid(), RLock())


# cls -> (reducer, the copyreg entry before mpcompat first registered cls, or _MISSING)
_entries = {}

# Exact types the picklers handle before they look at copyreg.dispatch_table (see save() in
# Modules/_pickle.c and Pickler.dispatch in pickle.py): an entry for them would never be used.
# pickle.PickleBuffer (3.8+) is one too; it is checked by name to keep pickle out of start-up.
_NEVER_DISPATCHED = frozenset(
    [type(None), bool, int, float, bytes, bytearray, str, tuple, list, dict, set, frozenset,
     type, type(lambda: None)])


def _table():
    import copyreg  # a first import registers the pending built-in reducers
    return copyreg.dispatch_table


def _name(cls):
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def _check_cls(cls):
    if not isinstance(cls, type):
        raise TypeError("cls must be a type (a class), got %r (%s)" % (cls, type(cls).__name__))


def _check(cls, reducer):
    _check_cls(cls)
    if not callable(reducer):
        raise TypeError("reducer must be callable (obj -> reduce tuple), got %r (%s)"
                        % (reducer, type(reducer).__name__))
    if cls in _NEVER_DISPATCHED or (cls.__module__, cls.__name__) == ("pickle", "PickleBuffer"):
        raise ValueError("cls %s cannot get a reducer: pickle handles it before it consults "
                         "copyreg, so a reducer would never run" % _name(cls))


def register(cls, reducer, *, override=False):
    """Make ``reducer`` (obj -> reduce tuple) pickle instances of exactly ``cls``; return it.

    The same reducer again is a no-op; replacing a copyreg entry (mpcompat's or another
    package's) raises ``ValueError`` unless ``override=True``.
    """
    _check(cls, reducer)
    table = _table()  # outside the lock: a first import of copyreg runs activation's hook
    with _lock():
        current = table.get(cls, _MISSING)
        entry = _entries.get(cls)
        if entry is not None and current is reducer and entry[0] is reducer:
            return reducer
        if not override and current is not _MISSING:
            owner = "mpcompat" if entry is not None and current is entry[0] else "another package"
            raise ValueError("cls %s already has a copyreg reducer (%r, registered by %s); pass "
                             "override=True to replace it" % (_name(cls), current, owner))
        _entries[cls] = (reducer, current if entry is None else entry[1])
        table[cls] = reducer
    return reducer


def reducer(cls, *, override=False):
    """Decorator form of :func:`register`: ``@mpcompat.reducer(MyType)`` above the reducer."""
    _check_cls(cls)
    return lambda func: register(cls, func, override=override)


def unregister(cls):
    """Remove mpcompat's reducer for ``cls``; restore the copyreg entry it replaced, unless
    something else replaced mpcompat's since. ``ValueError`` if mpcompat manages none."""
    _check_cls(cls)
    table = _table()
    with _lock():
        entry = _entries.pop(cls, None)
        if entry is None:
            raise ValueError("cls %s has no reducer registered by mpcompat" % _name(cls))
        if table.get(cls, _MISSING) is entry[0]:
            _put(table, cls, entry[1])


def unregister_if(cls, reducer):
    """Unregister ``cls`` only while mpcompat holds ``reducer`` for it (deactivation must not
    undo a user's override); return whether it did."""
    with _lock():
        entry = _entries.get(cls)
        if entry is None or entry[0] is not reducer:
            return False
        unregister(cls)
        return True


def _put(table, cls, value):
    """``table[cls] = value``, or remove ``cls`` from it if ``value`` is _MISSING."""
    if value is _MISSING:
        table.pop(cls, None)
    else:
        table[cls] = value


def registered():
    """Return a read-only snapshot mapping each type mpcompat manages to its reducer."""
    _table()
    with _lock():
        return _MappingProxyType({cls: entry[0] for cls, entry in _entries.items()})


class registering(object):
    """Context manager: register ``{cls: reducer}`` (process-wide) for a ``with`` block only.

    On exit, also when the block raises, the previous entries (mpcompat's and copyreg's) are
    restored exactly. ``__enter__`` returns :func:`registered` as it stands inside the block.
    """

    def __init__(self, reducers, *, override=False):
        self._items = list(dict(reducers).items())
        for cls, func in self._items:
            _check(cls, func)
        self._override = override

    def __enter__(self):
        table = _table()
        with _lock():
            self._saved = [(cls, _entries.get(cls, _MISSING), table.get(cls, _MISSING))
                           for cls, _ in self._items]
            try:
                for cls, func in self._items:
                    register(cls, func, override=self._override)
            except BaseException:
                self.__exit__()
                raise
        return registered()

    def __exit__(self, *exc_info):
        table = _table()
        with _lock():
            for cls, entry, copyreg_entry in self._saved:
                _put(_entries, cls, entry)
                _put(table, cls, copyreg_entry)
        return False


# The built-in reducers

VIEW_REDUCERS = {}  # view type -> its reducer


def _view_reducer(view):
    # On the pickling hot path: one Python call per view, no attribute look-ups. Keys and values
    # travel as the reduce arguments themselves (rebuild(*keys)), which saves the pickler a list
    # object and a memo entry per view; items travel as a dict.
    kind = type(view).__name__
    rebuild = getattr(rebuild_views, "rebuild_" + kind)
    if kind.endswith("_items"):
        def reduce(view, _dict=dict, _rebuild=rebuild):
            return _rebuild, (_dict(view),)
    else:
        def reduce(view, _tuple=tuple, _rebuild=rebuild):
            return _rebuild, _tuple(view)
    reduce.__name__ = reduce.__qualname__ = "reduce_" + kind
    reduce.__doc__ = "Reduce a view of type ``%s`` for ``mpcompat.rebuild_views.%s``." % (
        kind, rebuild.__name__)
    VIEW_REDUCERS[type(view)] = reduce
    return reduce


reduce_dict_keys = _view_reducer({}.keys())
reduce_dict_values = _view_reducer({}.values())
reduce_dict_items = _view_reducer({}.items())
reduce_odict_keys = _view_reducer(OrderedDict().keys())
reduce_odict_values = _view_reducer(OrderedDict().values())
reduce_odict_items = _view_reducer(OrderedDict().items())

MODULE_TYPE = type(sys)  # types.ModuleType, without importing types (start-up time)
# A child process has a __main__ of its own; the parent's cannot be imported there by name.
_UNIMPORTABLE = frozenset(["__main__", "__mp_main__"])


def reduce_module(module, _modules=sys.modules):
    """Reduce a module to its import name; refuse one the receiving process cannot import."""
    # TypeError, as the standard library raises for every module: callers catching it still do.
    name = getattr(module, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(
            "cannot pickle module %r: it has no __name__ to import it by" % (module,))
    if name in _UNIMPORTABLE:
        raise TypeError(
            "cannot pickle module %r: a child process has a __main__ module of its own, not "
            "this one. Keep a reference to an importable module instead, or move what it "
            "provides into one." % name)
    if _modules.get(name) is not module:
        raise TypeError(
            "cannot pickle module %r: sys.modules[%r] is %s, so a child process importing %r "
            "would not get this module (modules loaded from files under temporary names, such "
            "as config files, cannot be imported by name). Keep the values it defines instead "
            "of the module itself." % (
                name, name, "missing" if name not in _modules else "another object", name))
    from mpcompat.rebuild import rebuild_module
    return rebuild_module, (name,)


BUILTIN_REDUCERS = dict(VIEW_REDUCERS)
BUILTIN_REDUCERS[MODULE_TYPE] = reduce_module
