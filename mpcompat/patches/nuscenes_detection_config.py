"""Patch ``nuscenes.eval.detection.data_classes.DetectionConfig``: ``class_names`` is a list.

nuscenes-devkit sets it to a ``dict_keys`` view (nuscenes-devkit#1155), which no CPython
pickles. ``__init__`` is wrapped in place (wrapt: the class keeps its identity); after it, a
``dict_keys`` ``class_names`` becomes a list in ``class_range`` order.
"""
from mpcompat.patcher import Patcher, Skip

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
    """Put back the original ``__init__``, where nobody has replaced it since."""
    patcher.restore(module)


def _init_wrapper(wrapped, instance, args, kwargs):
    """Run the original ``__init__``, then make a ``dict_keys`` ``class_names`` a list."""
    wrapped(*args, **kwargs)
    names = instance.__dict__.get("class_names")
    if type(names) is _DICT_KEYS:
        instance.class_names = list(names)
