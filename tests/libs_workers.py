"""Child-side functions for the library tests (tests/libs, tests/old_stack).

Spawn children import this module by name (``tests/`` is on the path they inherit), so it
imports nothing heavy at module level: each function imports the library it needs.
"""
import sys

TRACKING_MODULE = "nuscenes.eval.tracking.data_classes"


def call_each(calls):
    """Run ``[(function, args), ...]`` here, in order; return their results.

    One task instead of several: a reused pool worker pays a library's import only once.
    """
    return [function(*args) for function, args in calls]


class Holder(object):
    """Keeps an object as an attribute, as a dataset keeps its evaluation config."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def detection_view(holder):
    """Return ``(type name, list)`` of ``holder.config.class_names`` as this child got it."""
    names = holder.config.class_names
    return type(names).__name__, list(names)


def tracking_box_after_unpickling(data):
    """Unpickle a TrackingConfig from ``data`` here, then build a TrackingBox of each class.

    If an earlier task already made a TrackingConfig in this (reused) worker, the module state
    is first set back to its import-time values, so the check starts as a fresh child does.
    Returns a dict: ``fresh``, the classes TrackingBox accepted, TRACKING_NAMES, nelem.
    """
    import pickle
    fresh = TRACKING_MODULE not in sys.modules
    if not fresh:
        module = sys.modules[TRACKING_MODULE]
        module.TRACKING_NAMES = []
        module.TrackingMetricData.nelem = None
    config = pickle.loads(data)
    module = sys.modules[TRACKING_MODULE]
    accepted = [module.TrackingBox(tracking_name=name, tracking_score=0.5).tracking_name
                for name in config.tracking_names]
    return {"fresh": fresh, "accepted": accepted, "TRACKING_NAMES": list(module.TRACKING_NAMES),
            "nelem": module.TrackingMetricData.nelem, "mpcompat": "mpcompat" in sys.modules}


def tracking_box(config):
    """Build a TrackingBox of the config's first class (fails in a fresh child unpatched)."""
    from nuscenes.eval.tracking.data_classes import TrackingBox
    return TrackingBox(tracking_name=config.tracking_names[0], tracking_score=0.5).tracking_name


def module_identity(mapping):
    """Return ``{key: (module name, is it the module this child has under that name)}``."""
    return {key: (module.__name__, sys.modules.get(module.__name__) is module)
            for key, module in mapping.items()}


def config_summary(config):
    """Return what a worker reads from an mmcv Config, and whether it kept a module."""
    kept = {key: (value.__name__, sys.modules.get(value.__name__) is value)
            for key, value in config.items() if type(value) is type(sys)}
    return {"lr": config.lr, "model": config.model.type, "depth": config.model.depth,
            "modules": kept}
