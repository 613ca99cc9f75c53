"""The built-in reducers that activation registers in ``copyreg.dispatch_table``
(``BUILTIN_REDUCERS``).

- The six dict views, which no CPython version pickles. A keys view ships its keys, a values
  view its values, an items view a copy of the mapping: nothing else of the dict (cloudpickle's
  choice too). :mod:`mpcompat.rebuild_views` rebuilds them on a fresh dict of the same kind.
- Module objects: an importable module pickles as its name. mmcv before 1.4.8 keeps the modules
  a config file imports inside ``Config``, datasets sometimes keep one as an attribute; the
  standard library refuses both with ``cannot pickle 'module' object``.

Loaded when copyreg is first imported (nothing can pickle before); imports only built-in modules.
"""
import sys

from mpcompat import rebuild_views

try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict

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
