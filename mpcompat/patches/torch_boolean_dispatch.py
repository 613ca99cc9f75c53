"""Patch ``torch.boolean_dispatch``: functions made by boolean_dispatch pickle by reference.

``torch._jit_internal.boolean_dispatch`` returns its inner ``fn`` with ``__module__`` and
``__name__`` set but ``__qualname__`` left as ``boolean_dispatch.<locals>.fn`` (pytorch#60210),
so ``pickle.dumps(F.max_pool2d)`` fails with "Can't pickle local object". This patch sets the
``__qualname__`` of each such function, in place, to a module-level name of its ``__module__``
that is really bound to it (its ``__name__`` when that is bound to it). A function that no
such name reaches keeps its qualname and stays unpicklable: it is never given a name that
resolves to another object. ``revert`` puts the original qualnames back.

The functions are found in ``torch._jit_internal.boolean_dispatched`` (a WeakKeyDictionary of
all of them). To see the ones made later (by torch on reload, by other libraries, by user
code), the class of that dictionary is switched to a subclass whose ``__setitem__`` reports
each new function; the dictionary keeps its identity. A function can only be named once the
statement that binds it has run, so a new function is named:
- when its module finishes importing: through the import hook, and, for a module in the middle
  of its first import, by noticing ``module.__spec__._initializing`` being reset at the end of
  ``importlib._bootstrap._load_unlocked`` (the flag CPython keeps for partly imported modules);
- otherwise (made at run time, or in ``__main__``) at the next sweep: the next function made,
  the next import of a watched module, or :func:`name_pending`.
"""
import sys
import weakref
from _thread import RLock
from importlib.machinery import ModuleSpec

from mpcompat import importhook
from mpcompat.patch_table import Skip

_lock = RLock()
_MISSING = object()
_targets = set()  # names of the target modules the patch is applied on
_renamed = weakref.WeakKeyDictionary()  # function -> (original qualname, qualname we set)
_watched = set()  # module names watched through the import hook for their functions
_hooked_specs = {}  # module name -> spec whose class was switched to _CompletionSpec
_tables = []  # the boolean_dispatched dictionaries whose class is switched


class _NamingTable(weakref.WeakKeyDictionary):
    """``boolean_dispatched`` as seen while the patch is applied: reports each new function."""

    __slots__ = ()

    def __setitem__(self, key, value):
        weakref.WeakKeyDictionary.__setitem__(self, key, value)
        _on_created(key)


class _CompletionSpec(ModuleSpec):
    """A module's spec during its first import: reports when the import completes."""

    __slots__ = ()

    def __setattr__(self, name, value):
        ModuleSpec.__setattr__(self, name, value)
        if name == "_initializing" and not value:
            self.__class__ = ModuleSpec
            _on_import_complete(self.name)


def apply(module):
    """Name every boolean_dispatch function there is, and watch for new ones."""
    table = _dispatch_table()
    with _lock:
        _targets.add(module.__name__)
        if type(table) is weakref.WeakKeyDictionary:
            table.__class__ = _NamingTable
            _tables.append(table)
        _settle(module)
        for name in sorted({_module_name(fn) for fn in list(table.keys())} - {module.__name__}):
            _track(name)


def revert(module):
    """Stop applying on ``module``; once no target is left, undo everything.

    The patch is process-wide (one table, functions of any module), so reverting one of two
    targets leaves it in place; reverting the last restores every qualname it set, the
    table's class and the specs it watches, and stops watching modules.
    """
    with _lock:
        _targets.discard(module.__name__)
        if not _targets:
            _undo_all()


def name_pending():
    """Name the functions that can be named now; return how many are named by this patch.

    For a function made at run time or in ``__main__``, whose name is bound after the patch
    last looked. A no-op while the patch is not applied.
    """
    with _lock:
        if not _targets:
            return 0
        for name in sorted({_module_name(fn) for fn in list(_dispatch_table().keys())}):
            module = sys.modules.get(name)
            if module is not None:
                _name_functions_of(module)
        return len(_renamed)


def _dispatch_table():
    jit_internal = sys.modules.get("torch._jit_internal")
    if jit_internal is None:
        import torch._jit_internal as jit_internal
    table = getattr(jit_internal, "boolean_dispatched", None)
    if not isinstance(table, weakref.WeakKeyDictionary):
        raise Skip("torch._jit_internal.boolean_dispatched is missing or not a WeakKeyDictionary")
    return table


def _module_name(fn):
    return getattr(fn, "__module__", None) or ""


def _track(name):
    """Name the functions of module ``name`` now and each time it is (re)imported."""
    if not name:
        return
    if name in _watched:
        module = sys.modules.get(name)
        if module is not None:
            _settle(module)
        return
    _watched.add(name)
    importhook.watch(name, _on_module_executed)  # runs at once if already imported


def _settle(module):
    """Name what is bound now; if the module is mid-import, look again when it completes."""
    _name_functions_of(module)
    if _initializing(module):
        _hook_spec(module)


def _initializing(module):
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _hook_spec(module):
    spec = module.__spec__
    if type(spec) is ModuleSpec:  # anything else (a subclass, a custom spec) is left alone
        spec.__class__ = _CompletionSpec
        _hooked_specs[module.__name__] = spec


def _on_created(fn):
    # Runs inside somebody's import: never raise.
    try:
        with _lock:
            if not _targets:
                return
            name = _module_name(fn)
            module = sys.modules.get(name)
            if name in _watched and module is not None:
                if _initializing(module):
                    _hook_spec(module)
                else:
                    _name_one(fn, module)
            else:
                _track(name)
    except Exception:
        pass


def _on_module_executed(module):
    try:
        with _lock:
            if _targets:
                _settle(module)
    except Exception:
        pass


def _on_import_complete(name):
    # Runs in the finally clause of importlib's _load_unlocked: never raise.
    try:
        with _lock:
            _hooked_specs.pop(name, None)
            module = sys.modules.get(name)
            if _targets and module is not None:
                _name_functions_of(module)
    except Exception:
        pass


def _name_functions_of(module):
    for fn in list(_dispatch_table().keys()):
        if _module_name(fn) == module.__name__:
            _name_one(fn, module)


def _name_one(fn, module):
    """Give ``fn`` a qualname bound to it in ``module``; drop a name of ours gone stale."""
    current = fn.__qualname__
    if _resolves(module, current, fn):
        return
    name = _bound_name(module, fn)
    entry = _renamed.get(fn)
    if name is None:
        if entry is not None and current == entry[1]:  # e.g. rebound by importlib.reload
            fn.__qualname__ = entry[0]
            del _renamed[fn]
        return
    original = entry[0] if entry is not None and current == entry[1] else current
    fn.__qualname__ = name
    _renamed[fn] = (original, name)


def _resolves(module, qualname, fn):
    if "<" in qualname:
        return False
    parts = qualname.split(".")
    obj = vars(module).get(parts[0], _MISSING)
    try:
        for part in parts[1:]:
            obj = getattr(obj, part, _MISSING)
    except Exception:
        return False
    return obj is fn


def _bound_name(module, fn):
    namespace = vars(module)
    if namespace.get(fn.__name__, _MISSING) is fn:
        return fn.__name__
    for key, value in list(namespace.items()):
        if value is fn and isinstance(key, str) and key.isidentifier():
            return key
    return None


def _undo_all():
    for fn, (original, ours) in list(_renamed.items()):
        if fn.__qualname__ == ours:
            fn.__qualname__ = original
    _renamed.clear()
    for name in sorted(_watched):
        importhook.unwatch(name, _on_module_executed)
    _watched.clear()
    for spec in list(_hooked_specs.values()):
        if type(spec) is _CompletionSpec:
            spec.__class__ = ModuleSpec
    _hooked_specs.clear()
    for table in _tables:
        if type(table) is _NamingTable:
            table.__class__ = weakref.WeakKeyDictionary
    del _tables[:]
