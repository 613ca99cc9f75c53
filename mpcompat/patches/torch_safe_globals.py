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
    unpickler = getattr(module, "_weights_only_unpickler", None)
    if not hasattr(module, "get_safe_globals") or not hasattr(unpickler, "_remove_safe_globals"):
        raise Skip("torch.serialization cannot add and remove safe globals (torch < 2.5)")
    present = module.get_safe_globals()
    missing = [f for f in VIEW_REBUILDERS if not _listed(f, present)]
    if missing:
        module.add_safe_globals(missing)
        _added.extend(f for f in missing if not _listed(f, _added))


def revert(module):
    """Remove from torch's safe globals the rebuild functions this patch added."""
    ours = list(_added)
    del _added[:]
    if ours:
        module._weights_only_unpickler._remove_safe_globals(ours)


def _listed(func, entries):
    return any(entry is func for entry in entries)
