"""Library methods wrapped in place with ``wrapt.FunctionWrapper``, and put back.

Used by the library patches (torch, nuscenes-devkit), never by the standard-library ones:
importing this module imports wrapt. The classes keep their identity; each wrapper's
``__wrapped__`` is the original method.
"""
import wrapt


class WrappedMethods(object):
    """The methods one patch has wrapped, per class: a class that ``importlib.reload`` left
    behind stays recorded, and is put back with the module it came from."""

    def __init__(self):
        self._wrapped = {}  # (class, name) -> (original, our wrapper)

    def wrap(self, cls, name, wrapper):
        """Wrap ``cls.<name>`` (defined on ``cls`` itself) with
        ``wrapt.FunctionWrapper(original, wrapper)``, once per class and name."""
        if (cls, name) in self._wrapped:
            return
        original = cls.__dict__[name]
        ours = wrapt.FunctionWrapper(original, wrapper)
        self._wrapped[(cls, name)] = (original, ours)
        setattr(cls, name, ours)

    def unwrap(self, module):
        """Put back the originals of the classes defined in ``module`` where ours is still in
        place (a method someone else has put there since stays)."""
        for key in [k for k in self._wrapped if k[0].__module__ == module.__name__]:
            original, ours = self._wrapped.pop(key)
            cls, name = key
            if cls.__dict__.get(name) is ours:
                setattr(cls, name, original)
