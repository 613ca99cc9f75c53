"""Patch ``torch.safe_globals``: ``torch.load(weights_only=True)`` accepts dict views.

Checkpoints saved through mpcompat's view reducers name ``mpcompat.rebuild_views`` functions:
those six (nothing else) are added to torch's safe globals; ``revert`` removes the ones it added.
"""
from mpcompat import rebuild_views
from mpcompat.patching.spec import Skip

# The whole of mpcompat.rebuild_views (which holds nothing else callable), and nothing else.
VIEW_REBUILDERS = tuple(getattr(rebuild_views, name) for name in rebuild_views.__all__)
_added = []  # the rebuild functions this patch added (others' entries are never touched)


def apply(module):
    """Add the view rebuild functions missing from torch's safe globals."""
    unpickler = getattr(module, "_weights_only_unpickler", None)
    if not hasattr(module, "get_safe_globals") or not hasattr(unpickler, "_remove_safe_globals"):
        raise Skip("torch.serialization cannot add and remove safe globals (torch < 2.5)")
    present = module.get_safe_globals()
    missing = [f for f in VIEW_REBUILDERS if not any(f is entry for entry in present)]
    if missing:
        module.add_safe_globals(missing)
        _added.extend(f for f in missing if f not in _added)


def revert(module):
    """Remove from torch's safe globals the rebuild functions this patch added."""
    ours = list(_added)
    del _added[:]
    if ours:
        module._weights_only_unpickler._remove_safe_globals(ours)
