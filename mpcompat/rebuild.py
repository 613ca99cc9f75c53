"""Rebuild functions named by mpcompat's pickles.

Every pickle that mpcompat's reducers produce refers to one of these functions by its import
path (``mpcompat.rebuild.<name>``). Their names, module and signatures are part of the pickle
format: moving or renaming one makes every pickle written before unreadable. The golden pickles
under ``tests/golden/`` fail loudly if that happens.

This module imports only the standard library: it is loaded in every child process that
unpickles a view, before anything else of mpcompat may be needed.
"""
try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict
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
