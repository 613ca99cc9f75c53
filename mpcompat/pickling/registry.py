"""The reducer registry: mpcompat's entries in ``copyreg.dispatch_table``.

copyreg's table is what the C and pure-Python picklers, ``ForkingPickler`` (which copies it at
every ``__init__``), ``torch.save`` and ``copy.copy``/``copy.deepcopy`` all consult, so an entry
made here applies everywhere at once. The registry remembers, for each type it manages, the
entry copyreg held before mpcompat touched that type, so that ``unregister`` can put it back.

copyreg is imported on first use, not with this module: activation defers registering the
built-in reducers until copyreg is imported (nothing can pickle before), and its import hook
may call back into this module while copyreg itself is being imported.
"""
from _thread import RLock

__all__ = ["register", "unregister", "registered", "registering", "reducer"]

_MISSING = object()
# types.FunctionType and types.MappingProxyType, without importing types (start-up time)
_FunctionType = type(lambda: None)
_MappingProxyType = type(type.__dict__)
_lock = RLock()
# cls -> (reducer, the copyreg entry before mpcompat first registered cls, or _MISSING)
_entries = {}

# Exact types the picklers handle before they look at copyreg.dispatch_table (see save() in
# Modules/_pickle.c and Pickler.dispatch in pickle.py): an entry for them would never be used.
# pickle.PickleBuffer (3.8+) is one too; it is checked by name to keep pickle out of start-up.
_NEVER_DISPATCHED = frozenset(
    [type(None), bool, int, float, bytes, bytearray, str, tuple, list, dict, set, frozenset,
     type, _FunctionType])


def _table():
    import copyreg
    return copyreg.dispatch_table


def _describe(obj):
    return "%r (%s)" % (obj, type(obj).__name__)


def _check(cls, reducer):
    if not isinstance(cls, type):
        raise TypeError("cls must be a type (a class), got %s" % _describe(cls))
    if not callable(reducer):
        raise TypeError("reducer must be callable (obj -> reduce tuple), got %s" % _describe(reducer))
    if cls in _NEVER_DISPATCHED or (cls.__module__, cls.__name__) == ("pickle", "PickleBuffer"):
        raise ValueError(
            "cls %s.%s cannot get a reducer: pickle handles it before it consults copyreg, so a "
            "reducer would never run" % (cls.__module__, cls.__qualname__))


def register(cls, reducer, *, override=False):
    """Make ``reducer`` pickle instances of exactly ``cls``; return ``reducer``.

    ``reducer(obj)`` returns a reduce tuple, as for ``copyreg.pickle``; the callable it names
    must be importable in the process that unpickles. Registering the same reducer again is a
    no-op. A type that already has a copyreg entry mpcompat did not make, or a different
    mpcompat reducer, is refused with ``ValueError`` unless ``override=True``.
    """
    _check(cls, reducer)
    table = _table()  # outside the lock: a first import of copyreg runs activation's hook
    with _lock:
        current = table.get(cls, _MISSING)
        entry = _entries.get(cls)
        if entry is not None and current is reducer and entry[0] is reducer:
            return reducer
        if not override and current is not _MISSING:
            owner = "mpcompat" if entry is not None and current is entry[0] else "another package"
            raise ValueError(
                "cls %s.%s already has a copyreg reducer (%r, registered by %s); pass "
                "override=True to replace it" % (cls.__module__, cls.__qualname__, current, owner))
        previous = entry[1] if entry is not None else current
        _entries[cls] = (reducer, previous)
        table[cls] = reducer
    return reducer


def reducer(cls, *, override=False):
    """Decorator form of :func:`register`: ``@mpcompat.reducer(MyType)`` above the reducer."""
    if not isinstance(cls, type):
        raise TypeError("cls must be a type (a class), got %s" % _describe(cls))

    def decorate(func):
        return register(cls, func, override=override)
    return decorate


def unregister(cls):
    """Remove mpcompat's reducer for ``cls`` and restore the copyreg entry it replaced.

    If something else has replaced mpcompat's entry in copyreg since, that entry is left alone.
    Raises ``ValueError`` if mpcompat manages no reducer for ``cls``.
    """
    if not isinstance(cls, type):
        raise TypeError("cls must be a type (a class), got %s" % _describe(cls))
    _table()  # registers pending built-in reducers first
    with _lock:
        entry = _entries.pop(cls, None)
        if entry is None:
            raise ValueError("cls %s.%s has no reducer registered by mpcompat"
                             % (cls.__module__, cls.__qualname__))
        _restore_copyreg(cls, entry[0], entry[1])


def unregister_if(cls, reducer):
    """Unregister ``cls`` only while ``reducer`` is the reducer mpcompat holds for it.

    Returns True if it did. Used by deactivation, which must not undo a user's override.
    """
    with _lock:
        entry = _entries.get(cls)
        if entry is None or entry[0] is not reducer:
            return False
        unregister(cls)
        return True


def _restore_copyreg(cls, ours, previous):
    if _table().get(cls, _MISSING) is not ours:
        return  # replaced by someone else since: theirs stays
    if previous is _MISSING:
        del _table()[cls]
    else:
        _table()[cls] = previous


def registered():
    """Return a read-only snapshot mapping each type mpcompat manages to its reducer."""
    _table()  # registers pending built-in reducers first
    with _lock:
        return _MappingProxyType({cls: entry[0] for cls, entry in _entries.items()})


class registering(object):
    """Context manager: register ``{cls: reducer}`` for a ``with`` block only.

    On exit the previous state (mpcompat's entries and copyreg's) is restored exactly, also
    when the block raises. The registration is process-wide while the block runs.
    ``__enter__`` returns :func:`registered` as it stands inside the block.
    """

    def __init__(self, reducers, *, override=False):
        self._items = list(dict(reducers).items())
        for cls, func in self._items:
            _check(cls, func)
        self._override = override
        self._saved = None

    def __enter__(self):
        _table()  # registers pending built-in reducers first
        with _lock:
            self._saved = [(cls, _entries.get(cls), _table().get(cls, _MISSING))
                           for cls, _ in self._items]
            try:
                for cls, func in self._items:
                    register(cls, func, override=self._override)
            except BaseException:
                _restore_snapshot(self._saved)
                raise
        return registered()

    def __exit__(self, *exc_info):
        with _lock:
            _restore_snapshot(self._saved)
        return False


def _restore_snapshot(saved):
    for cls, entry, copyreg_entry in saved:
        if entry is None:
            _entries.pop(cls, None)
        else:
            _entries[cls] = entry
        if copyreg_entry is _MISSING:
            _table().pop(cls, None)
        else:
            _table()[cls] = copyreg_entry
