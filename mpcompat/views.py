"""Reducers for the six dict view types, which no CPython version pickles.

A keys view ships its keys, a values view its values, an items view a copy of the mapping: no
other data of the underlying dict reaches the pickle. Each view is rebuilt on a fresh dict of
the same kind, so type and order survive; a view unpickled together with its dict is no longer
linked to it (the same choice cloudpickle makes).

The reducers sit on the pickling hot path: one Python call per view, no attribute look-ups.
Keys and values travel as the reduce arguments themselves (``rebuild(*keys)``), which saves the
pickler an extra list object and memo entry per view.
"""
try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict

from mpcompat.rebuild import (
    rebuild_dict_items,
    rebuild_dict_keys,
    rebuild_dict_values,
    rebuild_odict_items,
    rebuild_odict_keys,
    rebuild_odict_values,
)

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
