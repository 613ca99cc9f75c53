"""How mpcompat pickles built-in types, and every function its pickles name.

Rebuild functions: every pickle that mpcompat produces refers to one of the ``rebuild_*``
functions here by its import path (``mpcompat.rebuild.<name>``). Their names, module and
signatures are part of the pickle format: moving or renaming one makes every pickle written
before unreadable. The golden pickles under ``tests/golden/`` fail loudly if that happens.

Built-in reducers (``reduce_*``, ``BUILTIN_REDUCERS``), which activation registers in copyreg:
- The six dict views, which no CPython version pickles. A keys view ships its keys, a values
  view its values, an items view a copy of the mapping: no other data of the underlying dict
  reaches the pickle. Each view is rebuilt on a fresh dict of the same kind, so type and order
  survive; a view unpickled together with its dict is no longer linked to it (cloudpickle's
  choice too). These reducers sit on the pickling hot path: one Python call per view, no
  attribute look-ups; keys and values travel as the reduce arguments themselves
  (``rebuild(*keys)``), which saves the pickler a list object and a memo entry per view.
  Where the C extension ``mpcompat._speedups`` is built, ``VIEW_REDUCERS`` holds its keys and
  values reducers instead: they produce the same pickles, and views whose keys are the very
  same objects share one arguments tuple, which the pickler then writes once
  (``mpcompat/_speedups.c`` says why that matters). ``MPCOMPAT_NO_SPEEDUPS=1`` keeps the
  pure-Python ones; ``SPEEDUPS`` says which are in use.
- Module objects: an importable module pickles as a reference to its name. mmcv before 1.4.8
  keeps the modules a config file imports inside ``Config``; datasets sometimes keep a module
  as an attribute; the standard library refuses both with ``cannot pickle 'module' object``.

Reducers and rebuild functions share this module because it is loaded in every interpreter at
start-up and in every child that unpickles a view: one module import less on both paths. It
imports only the standard library.
"""
try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict
import os
import sys

__all__ = [
    "rebuild_dict_keys",
    "rebuild_dict_values",
    "rebuild_dict_items",
    "rebuild_odict_keys",
    "rebuild_odict_values",
    "rebuild_odict_items",
    "rebuild_module",
    "rebuild_by_init",
    "rebuild_torch_generator",
    "BUILTIN_REDUCERS",
]


def rebuild_dict_keys(*keys):
    """Return a ``dict_keys`` view over ``keys``, in that order."""
    return dict.fromkeys(keys).keys()


def rebuild_dict_values(*values):
    """Return a ``dict_values`` view over ``values``, in that order."""
    return dict(enumerate(values)).values()


def rebuild_dict_items(mapping):
    """Return a ``dict_items`` view over a plain-dict copy of ``mapping``."""
    return dict(mapping).items()


def rebuild_odict_keys(*keys):
    """Return an ``odict_keys`` view over ``keys``, in that order."""
    return OrderedDict.fromkeys(keys).keys()


def rebuild_odict_values(*values):
    """Return an ``odict_values`` view over ``values``, in that order."""
    return OrderedDict(enumerate(values)).values()


def rebuild_odict_items(mapping):
    """Return an ``odict_items`` view over an ``OrderedDict`` copy of ``mapping``."""
    return OrderedDict(mapping).items()


def rebuild_module(name):
    """Return the module imported under ``name`` (the one already loaded, if any)."""
    module = sys.modules.get(name)
    if module is None:
        from importlib import import_module  # not at start-up: importlib costs time
        module = import_module(name)
    return module


def rebuild_by_init(cls, init_owner, init_kwargs, state):
    """Return a ``cls`` instance rebuilt by running ``init_owner.__init__`` again.

    For classes whose ``__init__`` also sets state outside the instance (module globals, class
    attributes), which a fresh process that only unpickles the instance would miss: the
    constructor runs with ``init_kwargs``, then the instance ``__dict__`` becomes ``state``.
    """
    obj = cls.__new__(cls)
    init_owner.__init__(obj, **init_kwargs)
    obj.__dict__.clear()
    obj.__dict__.update(state)
    return obj


def rebuild_torch_generator(device, seed, state):
    """Return a new ``torch.Generator`` on ``device`` with ``seed`` and the ``state`` bytes."""
    import torch
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    gen.set_state(torch.tensor(list(state), dtype=torch.uint8))
    return gen


# --- the built-in reducers -----------------------------------------------------------------------

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


PYTHON_VIEW_REDUCERS = {
    DICT_KEYS: reduce_dict_keys,
    DICT_VALUES: reduce_dict_values,
    DICT_ITEMS: reduce_dict_items,
    ODICT_KEYS: reduce_odict_keys,
    ODICT_VALUES: reduce_odict_values,
    ODICT_ITEMS: reduce_odict_items,
}


def _load_speedups():
    """Return (the bound ``mpcompat._speedups`` module or None, a line saying which is used)."""
    from mpcompat.activation import env_flag  # loaded with the package: no import cost
    if env_flag("MPCOMPAT_NO_SPEEDUPS"):
        return None, "pure Python (MPCOMPAT_NO_SPEEDUPS=%s)" % os.environ["MPCOMPAT_NO_SPEEDUPS"]
    try:
        from mpcompat import _speedups
    except ImportError as exc:
        return None, "pure Python (C extension not available: %s)" % exc
    _speedups.bind(dict_keys=rebuild_dict_keys, dict_values=rebuild_dict_values,
                   odict_keys=rebuild_odict_keys, odict_values=rebuild_odict_values)
    import gc  # built in: no import cost
    # cached argument tuples that no pickler holds any more are dropped after each collection
    gc.callbacks.append(_speedups.release_idle)
    return _speedups, "C (mpcompat._speedups)"


_speedups, SPEEDUPS = _load_speedups()
VIEW_REDUCERS = dict(PYTHON_VIEW_REDUCERS)
if _speedups is not None:
    VIEW_REDUCERS.update({
        DICT_KEYS: _speedups.reduce_dict_keys,
        DICT_VALUES: _speedups.reduce_dict_values,
        ODICT_KEYS: _speedups.reduce_odict_keys,
        ODICT_VALUES: _speedups.reduce_odict_values,
    })


def release_cached_views():
    """Drop every arguments tuple the C keys reducers keep (no-op when pure Python)."""
    if _speedups is not None:
        _speedups.clear_cache()


MODULE_TYPE = type(sys)  # types.ModuleType, without importing types (start-up time)
# A child process has a __main__ of its own; the parent's cannot be imported there by name.
_UNIMPORTABLE = frozenset(["__main__", "__mp_main__"])


def reduce_module(module, _modules=sys.modules, _rebuild=rebuild_module):
    """Reduce a module to its import name; refuse one the receiving process cannot import."""
    name = getattr(module, "__name__", None)
    if isinstance(name, str) and _modules.get(name) is module and name not in _UNIMPORTABLE:
        return _rebuild, (name,)
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
