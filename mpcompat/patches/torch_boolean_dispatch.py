"""Patch ``torch.boolean_dispatch``: functions made by boolean_dispatch pickle by reference.

boolean_dispatch leaves its functions' ``__qualname__`` local (pytorch#60210): "Can't pickle
local object". Each gets its ``__name__`` as ``__qualname__``, in place, as it enters the
``boolean_dispatched`` WeakKeyDictionary, whose class is switched to a naming subclass (no
function is wrapped); those made earlier are named when the patch applies.
"""
import weakref

from mpcompat.patcher import Patcher, Skip

_TARGET = "torch._jit_internal"
patcher = Patcher()


class _NamingTable(weakref.WeakKeyDictionary):
    """``boolean_dispatched`` while the patch is applied: names each function added."""

    __slots__ = ()

    def __setitem__(self, key, value):
        weakref.WeakKeyDictionary.__setitem__(self, key, value)
        try:
            name_at_birth(key)
        except Exception:  # inside somebody's import: never raise
            pass


def name_at_birth(fn):
    """Make ``fn``'s ``__name__`` its qualname, if torch left it local and a name was given."""
    qualname = getattr(fn, "__qualname__", "")
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__name__", None)
    if "<locals>" not in qualname or code is None or not isinstance(name, str) \
            or name == code.co_name or not name.isidentifier():
        return  # named already, not a boolean_dispatch function, or no func_name given
    patcher.replace(fn, "__qualname__", name, _TARGET)


def apply(module):
    """Name every boolean_dispatch function made so far; name new ones as they are made."""
    table = getattr(module, "boolean_dispatched", None)
    if not isinstance(table, weakref.WeakKeyDictionary):
        raise Skip("torch._jit_internal.boolean_dispatched is missing or not a "
                   "WeakKeyDictionary")
    if type(table) is weakref.WeakKeyDictionary:
        patcher.replace(table, "__class__", _NamingTable, _TARGET)
    for fn in list(table.keys()):
        name_at_birth(fn)


def revert(module):
    """Put back the dictionary's class and every qualname this patch set, where still ours."""
    patcher.restore(module)


def renamed():
    """The functions this patch has named, each with ``(torch's qualname, the one it set)``."""
    return {fn: (patcher.original(fn, name), fn.__qualname__)
            for fn, name in patcher.applied() if name == "__qualname__"}
