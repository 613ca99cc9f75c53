"""Patch ``nuscenes.eval.tracking.data_classes.TrackingConfig``: unpickling restores module state.

``TrackingConfig.__init__`` sets the module global ``TRACKING_NAMES``, which unpickling skips
("Unknown tracking_name car" in a spawn child). A ``__reduce_ex__`` naming
``mpcompat.rebuild.rebuild_by_init`` runs ``__init__`` again there, then restores ``__dict__``.
"""
from mpcompat.patcher import Patcher, Skip

# Pickling hooks whose presence means the class pickles its own way: then we stay out.
_OWN_PICKLING = ("__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
patcher = Patcher()


def apply(module):
    """Add ``__reduce_ex__`` to ``module.TrackingConfig``."""
    cls = getattr(module, "TrackingConfig", None)
    if not isinstance(cls, type):
        raise Skip("%s has no TrackingConfig class" % module.__name__)
    # Ours, from any application (another thread's activate() may apply it meanwhile), or
    # absent: each is read once, as another thread's revert may delete it meanwhile.
    own = [name for name in _OWN_PICKLING
           if getattr(cls.__dict__.get(name, apply), "__module__", None) != __name__]
    if own:
        raise Skip("TrackingConfig defines %s itself" % ", ".join(own))
    if not callable(getattr(cls, "serialize", None)):
        raise Skip("TrackingConfig has no serialize() giving its __init__ arguments")
    patcher.replace(cls, "__reduce_ex__", _make_reduce_ex(cls))


def revert(module):
    """Remove the ``__reduce_ex__`` added, where nobody has replaced it since."""
    patcher.restore(module)


def _make_reduce_ex(owner):
    def __reduce_ex__(self, protocol):
        if type(self).__reduce__ is not object.__reduce__:  # a subclass pickles its own way
            return object.__reduce_ex__(self, protocol)
        from mpcompat.rebuild import rebuild_by_init  # loaded with the first config pickled
        return rebuild_by_init, (type(self), owner, owner.serialize(self), self.__dict__)
    return __reduce_ex__
