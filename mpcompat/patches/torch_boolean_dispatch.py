"""Patch ``torch.boolean_dispatch``: functions made by boolean_dispatch pickle by reference.

``torch._jit_internal.boolean_dispatch(..., module_name=M, func_name=N)`` returns its inner
``fn`` with ``__module__ = M`` and ``__name__ = N`` but ``__qualname__`` left as
``boolean_dispatch.<locals>.fn`` (pytorch#60210), so ``pickle.dumps(F.max_pool2d)`` fails with
"Can't pickle local object". This patch names each such function as torch intends: its
``__qualname__`` becomes ``N``, in place (the function keeps its identity), at the moment it is
made. Pickle then finds it as ``M.N`` once the statement that binds it has run, and refuses,
with its own clear error ("not the same object as M.N"), a function bound under another name.

Every function boolean_dispatch makes passes through ``torch._jit_internal.boolean_dispatched``
(a WeakKeyDictionary of all of them) right after its name is set. The patch switches the class
of that dictionary to a subclass whose ``__setitem__`` names the new function: the dictionary
keeps its identity and contents, and no function is wrapped. This is still needed for
functions made after activation (by torch itself, which imports ``torch._jit_internal`` first,
by other libraries and by user code, including code that imported ``boolean_dispatch`` before
mpcompat was active). Functions made before the patch applied are named when it applies.
Both changes go through the patcher (``Patcher.replace`` of ``__class__`` and of each
``__qualname__``), so ``revert`` puts back those still ours.
"""
import weakref

from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

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
    """Give ``fn`` the qualname torch meant it to have (its ``__name__``), if torch left it
    local and a name was given; return whether it did."""
    qualname = getattr(fn, "__qualname__", "")
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__name__", None)
    if "<locals>" not in qualname or code is None or not isinstance(name, str) \
            or name == code.co_name or not name.isidentifier():
        return False  # named already, not a boolean_dispatch function, or no func_name given
    patcher.replace(fn, "__qualname__", name, _TARGET)
    return True


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
