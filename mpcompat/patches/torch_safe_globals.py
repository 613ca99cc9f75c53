"""Patch ``torch.safe_globals``: ``torch.load(weights_only=True)`` accepts dict views.

A checkpoint that holds dict views (``state_dict().keys()`` kept in a dict, a nuscenes-style
config) is written by ``torch.save`` through mpcompat's view reducers, so it names
``mpcompat.rebuild_views.rebuild_dict_keys`` and friends. ``torch.load`` defaults to
``weights_only=True`` since torch 2.6 and rejects every global it does not know. This patch
allowlists the six view rebuild functions (the whole of ``mpcompat.rebuild_views``, which holds
nothing else callable), and nothing else, with
``torch.serialization.add_safe_globals``; ``revert`` removes exactly the ones it added, so
safe globals that the user (or anyone else) added stay, including these six if they were
already there.
"""
from mpcompat import rebuild_views as rebuild
from mpcompat.patches import Skip

VIEW_REBUILDERS = (
    rebuild.rebuild_dict_keys,
    rebuild.rebuild_dict_values,
    rebuild.rebuild_dict_items,
    rebuild.rebuild_odict_keys,
    rebuild.rebuild_odict_values,
    rebuild.rebuild_odict_items,
)

_added = []  # the rebuild functions this patch added (others' entries are never touched)


def apply(module):
    """Add the view rebuild functions missing from torch's safe globals."""
    add = getattr(module, "add_safe_globals", None)
    get = getattr(module, "get_safe_globals", None)
    if add is None or get is None:
        raise Skip("torch.serialization has no add_safe_globals/get_safe_globals (torch < 2.4)")
    present = get()
    missing = [f for f in VIEW_REBUILDERS if not _listed(f, present)]
    if missing:
        add(missing)
        _added.extend(f for f in missing if not _listed(f, _added))


def revert(module):
    """Remove from torch's safe globals the rebuild functions this patch added."""
    ours = list(_added)
    del _added[:]
    if not ours:
        return
    import torch._weights_only_unpickler as unpickler
    remove = getattr(unpickler, "_remove_safe_globals", None)
    if remove is not None:
        remove(ours)
        return
    # torch 2.4 has no remove: rebuild the list without ours, keeping everybody else's.
    keep = [g for g in module.get_safe_globals() if not _listed(g, ours)]
    module.clear_safe_globals()
    if keep:
        module.add_safe_globals(keep)


def _listed(func, entries):
    return any(entry is func for entry in entries)
