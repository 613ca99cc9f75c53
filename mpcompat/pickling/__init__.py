"""Pickling: this package holds the built-in reducers that activation registers in
``copyreg.dispatch_table``; ``registry`` is the reducer registry, ``per_process`` the
per-process handles.

- The six dict views, which no CPython version pickles. A keys view ships its keys, a values
  view its values, an items view a copy of the mapping: no other data of the underlying dict
  reaches the pickle (cloudpickle's choice too). Rebuilt by :mod:`mpcompat.rebuild_views` on a
  fresh dict of the same kind, so type and order survive. These reducers sit on the pickling
  hot path: one Python call per view, no attribute look-ups; keys and values travel as the
  reduce arguments themselves (``rebuild(*keys)``), which saves the pickler a list object and a
  memo entry per view.
- Module objects: an importable module pickles as a reference to its name. mmcv before 1.4.8
  keeps the modules a config file imports inside ``Config``; datasets sometimes keep a module
  as an attribute; the standard library refuses both with ``cannot pickle 'module' object``.

Loaded when copyreg is first imported (nothing can pickle before); imports only the standard
library's built-in modules.
"""
import sys

from mpcompat.rebuild_views import (rebuild_dict_items, rebuild_dict_keys, rebuild_dict_values,
                                    rebuild_odict_items, rebuild_odict_keys, rebuild_odict_values)

try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict

DICT_KEYS = type({}.keys())
DICT_VALUES = type({}.values())
DICT_ITEMS = type({}.items())
ODICT_KEYS = type(OrderedDict().keys())
ODICT_VALUES = type(OrderedDict().values())
ODICT_ITEMS = type(OrderedDict().items())


def reduce_dict_keys(view, _tuple=tuple, _rebuild=rebuild_dict_keys):
    """Reduce a ``dict_keys`` view to its keys."""
    return _rebuild, _tuple(view)


def reduce_dict_values(view, _tuple=tuple, _rebuild=rebuild_dict_values):
    """Reduce a ``dict_values`` view to its values."""
    return _rebuild, _tuple(view)


def reduce_dict_items(view, _dict=dict, _rebuild=rebuild_dict_items):
    """Reduce a ``dict_items`` view to a plain dict of its items."""
    return _rebuild, (_dict(view),)


def reduce_odict_keys(view, _tuple=tuple, _rebuild=rebuild_odict_keys):
    """Reduce an ``odict_keys`` view to its keys."""
    return _rebuild, _tuple(view)


def reduce_odict_values(view, _tuple=tuple, _rebuild=rebuild_odict_values):
    """Reduce an ``odict_values`` view to its values."""
    return _rebuild, _tuple(view)


def reduce_odict_items(view, _dict=dict, _rebuild=rebuild_odict_items):
    """Reduce an ``odict_items`` view to a plain dict of its items (order kept)."""
    return _rebuild, (_dict(view),)


VIEW_REDUCERS = {
    DICT_KEYS: reduce_dict_keys,
    DICT_VALUES: reduce_dict_values,
    DICT_ITEMS: reduce_dict_items,
    ODICT_KEYS: reduce_odict_keys,
    ODICT_VALUES: reduce_odict_values,
    ODICT_ITEMS: reduce_odict_items,
}

MODULE_TYPE = type(sys)  # types.ModuleType, without importing types (start-up time)
# A child process has a __main__ of its own; the parent's cannot be imported there by name.
_UNIMPORTABLE = frozenset(["__main__", "__mp_main__"])


def reduce_module(module, _modules=sys.modules):
    """Reduce a module to its import name; refuse one the receiving process cannot import."""
    name = getattr(module, "__name__", None)
    if isinstance(name, str) and _modules.get(name) is module and name not in _UNIMPORTABLE:
        from mpcompat.rebuild import rebuild_module
        return rebuild_module, (name,)
    # TypeError, as the standard library raises for every module: callers catching it still do.
    if not isinstance(name, str):
        raise TypeError(
            "cannot pickle module %r: it has no __name__ to import it by" % (module,))
    if name in _UNIMPORTABLE:
        raise TypeError(
            "cannot pickle module %r: a child process has a __main__ module of its own, not "
            "this one. Keep a reference to an importable module instead, or move what it "
            "provides into one." % name)
    raise TypeError(
        "cannot pickle module %r: sys.modules[%r] is %s, so a child process importing %r "
        "would not get this module (modules loaded from files under temporary names, such "
        "as config files, cannot be imported by name). Keep the values it defines instead "
        "of the module itself." % (
            name, name, "missing" if name not in _modules else "another object", name))


BUILTIN_REDUCERS = dict(VIEW_REDUCERS)
BUILTIN_REDUCERS[MODULE_TYPE] = reduce_module
