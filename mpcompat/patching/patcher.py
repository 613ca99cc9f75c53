"""The one way a patch changes a library: replace an attribute, remember the original, put it
back later, and only where the replacement is still ours (gevent.monkey's saved originals).

A patch module keeps one ``Patcher``; its ``apply(module)`` calls :meth:`Patcher.replace` or
:meth:`Patcher.wrap`, and its ``revert(module)`` calls :meth:`Patcher.restore` with the same
module. Replacements are grouped by the target module they were made for, so a patch with two
targets reverts each one on its own.
"""
from _thread import RLock

_ABSENT = object()


class Patcher(object):
    """Records ``(owner, name) -> original`` for every replacement one patch makes."""

    def __init__(self):
        self._lock = RLock()
        self._records = {}  # (id(owner), name) -> [owner, name, original, new, target name]

    def replace(self, owner, name, new, target=None):
        """Set ``owner.name`` to ``new`` (as stored in ``owner.__dict__``, so a ``classmethod``
        stays one) and remember what was there. Replacing what is already ours keeps the first
        original. ``target``: the module the replacement belongs to (default: the owner's)."""
        with self._lock:
            key = (id(owner), name)
            record = self._records.get(key)
            if record is not None and _current(owner, name) is record[3]:
                original = record[2]
            else:
                original = owner.__dict__.get(name, _ABSENT)
            setattr(owner, name, new)
            self._records[key] = [owner, name, original, new, target or _module_of(owner)]
        return new

    def wrap(self, owner, name, wrapper, target=None):
        """Replace ``owner.name`` with ``wrapt.FunctionWrapper(original, wrapper)``: the wrapper
        keeps the original's identity (``__wrapped__``, signature, ``isinstance``). Never use it
        for functions that must pickle by reference: proxies do not pickle."""
        import wrapt  # only here: patches of the standard library never import it
        original = self.original(owner, name)
        return self.replace(owner, name, wrapt.FunctionWrapper(original, wrapper), target)

    def original(self, owner, name):
        """What ``owner.name`` was before this patcher replaced it (what it is, otherwise)."""
        with self._lock:
            record = self._records.get((id(owner), name))
            if record is not None and _current(owner, name) is record[3]:
                return record[2] if record[2] is not _ABSENT else _inherited(owner, name)
        value = owner.__dict__.get(name, _ABSENT)
        return value if value is not _ABSENT else _inherited(owner, name)

    def restore(self, module=None):
        """Put back the originals replaced for ``module`` (every one when None), each only if
        the replacement is still in place: what somebody set after us stays theirs."""
        name = getattr(module, "__name__", module)
        with self._lock:
            for key, (owner, attr, original, new, target) in list(self._records.items()):
                if name is not None and target != name:
                    continue
                del self._records[key]
                if _current(owner, attr) is not new:
                    continue
                if original is _ABSENT:
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)

    def applied(self):
        """The ``(owner, name)`` pairs that hold a replacement of ours right now."""
        with self._lock:
            return [(r[0], r[1]) for r in self._records.values() if _current(r[0], r[1]) is r[3]]


def _current(owner, name):
    return owner.__dict__.get(name, _ABSENT)


def _inherited(owner, name):
    """The raw attribute a class inherits (a descriptor as its base stores it)."""
    for base in getattr(owner, "__mro__", (owner,))[1:]:
        if name in base.__dict__:
            return base.__dict__[name]
    return getattr(owner, name)


def _module_of(owner):
    if type(owner).__name__ == "module":
        return owner.__name__
    return getattr(owner, "__module__", None)
