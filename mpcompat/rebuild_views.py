"""The six functions that every pickled dict view names: safe to allowlist.

Their module, names and signatures are part of the pickle format (the golden pickles under
``tests/golden/`` fail loudly if one moves). The module holds nothing else callable, so that a
restricted unpickler (``torch.load(weights_only=True)``, a ``find_class`` allowlist) may trust
all of it: each function only builds a dict view from plain values, on a fresh dict of the same
kind, so type and order survive. The rebuilders that import or run code live in
:mod:`mpcompat.rebuild` and must never be allowlisted.
"""

__all__ = ["rebuild_dict_keys", "rebuild_dict_values", "rebuild_dict_items",
           "rebuild_odict_keys", "rebuild_odict_values", "rebuild_odict_items"]


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
    from collections import OrderedDict  # not a module attribute: nothing else callable here
    return OrderedDict.fromkeys(keys).keys()


def rebuild_odict_values(*values):
    """Return an ``odict_values`` view over ``values``, in that order."""
    from collections import OrderedDict
    return OrderedDict(enumerate(values)).values()


def rebuild_odict_items(mapping):
    """Return an ``odict_items`` view over an ``OrderedDict`` copy of ``mapping``."""
    from collections import OrderedDict
    return OrderedDict(mapping).items()
