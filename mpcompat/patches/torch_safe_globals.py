"""Patch ``torch.safe_globals``: ``torch.load(weights_only=True)`` accepts dict views.

Checkpoints saved through mpcompat's view reducers name ``mpcompat.rebuild_views`` functions:
those six (nothing else) are added to torch's safe globals; ``revert`` removes the ones it added.
torch 2.5 on removes them with ``_weights_only_unpickler._remove_safe_globals``; torch 2.4 has
no remover, but keeps its safe globals in the list ``_marked_safe_globals_list`` (which
``add_safe_globals`` extends in place): there each added function is taken out of that list,
one entry apiece, in place.
"""
from mpcompat import rebuild_views
from mpcompat.patcher import Skip

# The whole of mpcompat.rebuild_views (which holds nothing else callable), and nothing else.
VIEW_REBUILDERS = tuple(getattr(rebuild_views, name) for name in rebuild_views.__all__)
_added = []  # the rebuild functions this patch added (others' entries are never touched)


def _torch24_list(module):
    """torch 2.4's list of safe globals, or None where torch has ``_remove_safe_globals``."""
    unpickler = getattr(module, "_weights_only_unpickler", None)
    if hasattr(unpickler, "_remove_safe_globals"):
        return None
    found = getattr(unpickler, "_marked_safe_globals_list", None)
    if not isinstance(found, list):
        raise Skip("torch.serialization has safe globals this patch cannot remove again (no "
                   "_weights_only_unpickler._remove_safe_globals, nor torch 2.4's list)")
    return found


def apply(module):
    """Add the view rebuild functions missing from torch's safe globals."""
    if not hasattr(module, "get_safe_globals") or not hasattr(module, "add_safe_globals"):
        raise Skip("torch.serialization has no add_safe_globals/get_safe_globals (torch < 2.4)")
    _torch24_list(module)  # Skip where what it adds could not be removed
    present = module.get_safe_globals()
    missing = [f for f in VIEW_REBUILDERS if not any(f is entry for entry in present)]
    if missing:
        module.add_safe_globals(missing)
        _added.extend(f for f in missing if f not in _added)


def revert(module):
    """Remove from torch's safe globals the rebuild functions this patch added."""
    ours = list(_added)
    del _added[:]
    if not ours:
        return
    entries = _torch24_list(module)
    if entries is None:
        module._weights_only_unpickler._remove_safe_globals(ours)
        return
    for func in ours:  # one entry each, in place: the list add_safe_globals extends stays
        for index, entry in enumerate(entries):
            if entry is func:
                del entries[index]
                break
