"""Rebuild functions that do more than build a value: never allowlist these.

Pickles that mpcompat produces for module objects, patched library classes, torch generators
and :func:`mpcompat.per_process` objects name one of the functions here by its import path
(``mpcompat.rebuild.<name>``); like those in :mod:`mpcompat.rebuild_views`, their names and
signatures are part of the pickle format.

Unlike the view rebuilders, these act on the receiving process: ``rebuild_module`` imports a
module by name, ``rebuild_by_init`` runs a constructor, ``rebuild_per_process`` calls a factory.
A restricted unpickler (a ``find_class`` allowlist, ``torch.serialization.add_safe_globals``)
must never trust this module: to the data in a pickle, these are ways to import and run code.
``rebuild_by_init`` at least refuses every class but the ones mpcompat patches.
"""
import sys

__all__ = ["rebuild_module", "rebuild_by_init", "rebuild_torch_generator", "rebuild_per_process"]

# (module, class name) of the classes whose pickles mpcompat rebuilds by running __init__ again
# (see mpcompat/patches/nuscenes_tracking_config.py): rebuild_by_init refuses any other.
BY_INIT_CLASSES = frozenset([("nuscenes.eval.tracking.data_classes", "TrackingConfig")])


def rebuild_module(name):
    """Return the module imported under ``name`` (the one already loaded, if any)."""
    module = sys.modules.get(name)
    if module is None:
        from importlib import import_module
        module = import_module(name)
    return module


def rebuild_by_init(cls, init_owner, init_kwargs, state):
    """Return a ``cls`` instance rebuilt by running ``init_owner.__init__`` again.

    For classes whose ``__init__`` also sets state outside the instance (module globals), which
    a fresh process that only unpickles the instance would miss: the constructor runs with
    ``init_kwargs``, then the instance ``__dict__`` becomes ``state``. ``init_owner`` must be one
    of the classes in ``BY_INIT_CLASSES`` (the very class found at that name) and ``cls`` that
    class or a subclass of it; anything else raises ``TypeError``.
    """
    if not _is_by_init_class(init_owner) or not isinstance(cls, type) \
            or not issubclass(cls, init_owner):
        raise TypeError("mpcompat.rebuild.rebuild_by_init rebuilds only %s, not %r / %r"
                        % (", ".join(sorted("%s.%s" % pair for pair in BY_INIT_CLASSES)),
                           cls, init_owner))
    obj = cls.__new__(cls)
    init_owner.__init__(obj, **init_kwargs)
    obj.__dict__.clear()
    obj.__dict__.update(state)
    return obj


def _is_by_init_class(owner):
    if not isinstance(owner, type):
        return False
    key = (getattr(owner, "__module__", None), getattr(owner, "__qualname__", None))
    if key not in BY_INIT_CLASSES:
        return False
    module = sys.modules.get(key[0])
    return module is not None and getattr(module, key[1], None) is owner


def rebuild_torch_generator(device, seed, state):
    """Return a new ``torch.Generator`` on ``device`` with ``seed`` and the ``state`` bytes."""
    import torch
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    gen.set_state(torch.tensor(list(state), dtype=torch.uint8))
    return gen


def __getattr__(name):
    # rebuild_per_process is defined with the class it rebuilds (mpcompat.pickling.per_process,
    # which imports wrapt), as mpcompat.rebuild.rebuild_per_process: loaded when a pickle names
    # it, and that module never imports this one back.
    if name == "rebuild_per_process":
        from mpcompat.pickling.per_process import rebuild_per_process
        return rebuild_per_process
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
