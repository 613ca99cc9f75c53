"""The reducer registry: mpcompat's entries in ``copyreg.dispatch_table``, which every pickler,
``ForkingPickler``, ``torch.save`` and ``copy`` consult; it remembers the entry copyreg held
before, for ``unregister`` to put back. The built-in reducers (the six dict views and modules)
are in it as activation registers them (:mod:`mpcompat.activation`, which holds the registry's
state, so that they register as copyreg is imported without loading this module).

Imports only built-in modules. copyreg is imported on first use, not with this module:
activation registers the built-in reducers only once copyreg is imported, and its import hook
may call back meanwhile.
"""
from mpcompat.activation import MISSING as _MISSING, claim, process_lock, put as _put, release
from mpcompat.activation import registry as _entries, registry_locks, type_name as _name

__all__ = ["register", "unregister", "registered", "registering", "reducer"]

_MappingProxyType = type(type.__dict__)  # not importing types (start-up time)


def _lock():
    """This process's lock of the registry (a forked child never waits for one its parent's
    thread held)."""
    return process_lock(registry_locks)


# Exact types the picklers handle before they look at copyreg.dispatch_table (see save() in
# Modules/_pickle.c and Pickler.dispatch in pickle.py): an entry for them would never be used.
# pickle.PickleBuffer (3.8+) is one too; it is checked by name to keep pickle out of start-up.
_NEVER_DISPATCHED = frozenset(
    [type(None), bool, int, float, bytes, bytearray, str, tuple, list, dict, set, frozenset,
     type, type(lambda: None)])


def _table():
    import copyreg  # a first import registers the pending built-in reducers
    return copyreg.dispatch_table


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
    return claim(table, cls, reducer, override)


def reducer(cls, *, override=False):
    """Decorator form of :func:`register`: ``@mpcompat.reducer(MyType)`` above the reducer."""
    _check_cls(cls)
    return lambda func: register(cls, func, override=override)


def unregister(cls):
    """Remove mpcompat's reducer for ``cls``; restore the copyreg entry it replaced, unless
    something else replaced mpcompat's since. ``ValueError`` if mpcompat manages none."""
    _check_cls(cls)
    if not release(_table(), cls):
        raise ValueError("cls %s has no reducer registered by mpcompat" % _name(cls))


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
