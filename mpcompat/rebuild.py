"""Rebuild functions that do more than build a value: never allowlist these.

Pickles of module objects, patched library classes, torch generators and
:func:`mpcompat.per_process` objects name these by import path (``mpcompat.rebuild.<name>``):
their names and signatures are part of the pickle format. They act on the receiving process
(import a module, run a constructor, resolve a factory), so a restricted unpickler must never
trust this module; ``rebuild_by_init`` at least refuses every class but those mpcompat patches.
"""
import sys

__all__ = ["rebuild_module", "rebuild_by_init", "rebuild_torch_generator", "rebuild_per_process"]

# (module, class name) of the classes rebuilt by running __init__ again
# (mpcompat/patches/nuscenes_tracking_config.py): rebuild_by_init refuses any other.
BY_INIT_CLASSES = frozenset([("nuscenes.eval.tracking.data_classes", "TrackingConfig")])


def rebuild_module(name):
    """Return the module imported under ``name`` (the one already loaded, if any)."""
    module = sys.modules.get(name)
    if module is None:
        from importlib import import_module
        module = import_module(name)
    return module


def rebuild_by_init(cls, init_owner, init_kwargs, state):
    """Return a ``cls`` instance rebuilt by running ``init_owner.__init__(**init_kwargs)`` again.

    For classes whose ``__init__`` also sets module globals, which a fresh process that only
    unpickled the instance would miss; the instance ``__dict__`` then becomes ``state``.
    ``init_owner`` must be the very class found at a name in ``BY_INIT_CLASSES``, and ``cls``
    that class or a subclass; anything else raises ``TypeError``.
    """
    key = isinstance(init_owner, type) and (getattr(init_owner, "__module__", None),
                                            getattr(init_owner, "__qualname__", None))
    if not (key in BY_INIT_CLASSES and getattr(sys.modules.get(key[0]), key[1], None) is init_owner
            and isinstance(cls, type) and issubclass(cls, init_owner)):
        raise TypeError("mpcompat.rebuild.rebuild_by_init rebuilds only %s, not %r / %r"
                        % (", ".join(sorted("%s.%s" % pair for pair in BY_INIT_CLASSES)),
                           cls, init_owner))
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


def __getattr__(name):
    # rebuild_per_process lives with its class (mpcompat.pickling.per_process, which imports
    # wrapt): loaded only when a pickle names it; that module never imports this one back.
    if name == "rebuild_per_process":
        from mpcompat.pickling.per_process import rebuild_per_process
        return rebuild_per_process
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
