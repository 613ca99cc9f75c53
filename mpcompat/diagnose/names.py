"""What the walker and the hints share: how a type is named in a report, and the marker for an
object pickled as a reference into ``__main__``."""
import pickle


class MainReference(pickle.PicklingError):
    """Not raised by pickle: marks an object pickled as a reference into ``__main__``. guard:
    ``(path, Binding)`` when the main script binds the name only inside its main guard."""

    guard = None


def type_name(cls):
    """``cls`` as a report names it: ``module.QualName``, or the bare name for builtins."""
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls))
    return name if module in (None, "builtins") else "%s.%s" % (module, name)
