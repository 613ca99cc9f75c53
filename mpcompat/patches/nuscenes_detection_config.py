"""Patch ``nuscenes.eval.detection.data_classes.DetectionConfig``: ``class_names`` is a list.

nuscenes-devkit 1.0.0 to 1.2.0 set ``self.class_names = self.class_range.keys()`` in
``DetectionConfig.__init__`` (nuscenes-devkit#1155), a ``dict_keys`` view that no CPython
version pickles; every dataset that keeps the config (mmdet3d, BEVFormer, UniAD) then cannot
reach a spawn worker. The patch wraps ``__init__`` in place with a ``wrapt.FunctionWrapper``
(signature, introspection and descriptor binding stay the original's; ``__wrapped__`` is the
original), so the class keeps its identity and references taken earlier with ``from ...
import DetectionConfig`` see it. After the original ``__init__`` ran, a ``dict_keys``
``class_names`` becomes a list in ``class_range`` order; everything else the original set is
left as it is. ``deserialize`` and both ``config_factory`` functions build configs through
``__init__``, so they are covered too.
"""
from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

_DICT_KEYS = type({}.keys())
patcher = Patcher()


def apply(module):
    """Wrap ``module.DetectionConfig.__init__``."""
    cls = getattr(module, "DetectionConfig", None)
    if not isinstance(cls, type):
        raise Skip("%s has no DetectionConfig class" % module.__name__)
    if "__init__" not in cls.__dict__:
        raise Skip("DetectionConfig defines no __init__ of its own")
    patcher.wrap(cls, "__init__", _init_wrapper)


def revert(module):
    """Put back the original ``__init__`` of every DetectionConfig patched in ``module``.

    A class whose ``__init__`` someone else has replaced since keeps theirs.
    """
    patcher.restore(module)


def _init_wrapper(wrapped, instance, args, kwargs):
    """Run the original ``__init__``, then make a ``dict_keys`` ``class_names`` a list."""
    wrapped(*args, **kwargs)
    names = instance.__dict__.get("class_names")
    if type(names) is _DICT_KEYS:
        instance.class_names = list(names)
