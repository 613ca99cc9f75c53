"""torch.safe_globals on real torch 2.13: torch.load(weights_only=True) of a checkpoint with dict
views; only the six view rebuilders are allowlisted; revert keeps what others added.

Runs only where torch >= 2.4 is installed (.venv): older torch has no weights_only loading
and no safe globals (there the patch is "not needed": tests/old_stack/test_quiet_old_stack.py).
"""
import collections
import io
import pickle
import zipfile

import pytest
import torch

import mpcompat
from mpcompat import rebuild_views
from mpcompat.patches import torch_safe_globals


def checkpoint_with_views():
    weights = {"conv.weight": torch.ones(2, 2), "conv.bias": torch.zeros(2)}
    odict = collections.OrderedDict(weights)
    data = {"weights": weights, "keys": weights.keys(), "values": weights.values(),
            "items": weights.items(), "okeys": odict.keys(), "ovalues": odict.values(),
            "oitems": odict.items()}
    buf = io.BytesIO()
    torch.save(data, buf)
    return data, buf.getvalue()


def test_weights_only_load_of_dict_views(restore_mpcompat):
    data, blob = checkpoint_with_views()
    loaded = torch.load(io.BytesIO(blob), weights_only=True)
    for key, view in data.items():
        assert type(loaded[key]) is type(view)
        if key in ("values", "ovalues"):
            assert all(torch.equal(a, b) for a, b in zip(loaded[key], view))
        elif key in ("items", "oitems", "weights"):
            assert list(dict(loaded[key])) == list(dict(view))
        else:
            assert list(loaded[key]) == list(view)
    active = torch.serialization.get_safe_globals()
    mpcompat.deactivate()
    others = torch.serialization.get_safe_globals()
    assert len(active) == len(others) + 6
    assert {id(f) for f in active} - {id(f) for f in others} == {
        id(f) for f in torch_safe_globals.VIEW_REBUILDERS}
    with pytest.raises(pickle.UnpicklingError,
                       match="Unsupported global: GLOBAL mpcompat.rebuild_views.rebuild_dict_"):
        torch.load(io.BytesIO(blob), weights_only=True)
    mpcompat.activate()
    assert type(torch.load(io.BytesIO(blob), weights_only=True)["keys"]) is type({}.keys())


def test_weights_only_load_refuses_the_powerful_rebuilders():
    """Only the six view rebuilders are allowlisted: a checkpoint naming rebuild_module (which
    imports any module) or rebuild_by_init is refused by torch.load(weights_only=True)."""
    for name in ("rebuild_module", "rebuild_by_init"):
        attack = (b"\x80\x02cmpcompat.rebuild\n" + name.encode()
                  + b"\nX\x03\x00\x00\x00sys\x85R.")
        buffer = io.BytesIO()
        torch.save({"x": 1}, buffer)  # a real zip checkpoint, then its data.pkl replaced
        buffer.seek(0)
        with zipfile.ZipFile(buffer) as src:
            entries = {n: src.read(n) for n in src.namelist()}
        forged = io.BytesIO()
        with zipfile.ZipFile(forged, "w") as dst:
            for n, content in entries.items():
                dst.writestr(n, attack if n.endswith("data.pkl") else content)
        forged.seek(0)
        with pytest.raises(pickle.UnpicklingError,
                           match="Unsupported global: GLOBAL mpcompat.rebuild.%s" % name):
            torch.load(forged, weights_only=True)


def test_revert_keeps_safe_globals_it_did_not_add(restore_mpcompat):
    def users_own():
        """A safe global a user registered."""
    mpcompat.deactivate()
    with torch.serialization.safe_globals([users_own, rebuild_views.rebuild_dict_keys]):
        mpcompat.activate()
        mpcompat.deactivate()
        left = torch.serialization.get_safe_globals()
        assert users_own in left and rebuild_views.rebuild_dict_keys in left
        assert rebuild_views.rebuild_dict_values not in left
    mpcompat.activate()


def test_applying_again_changes_nothing():
    safe = torch.serialization.get_safe_globals()
    torch_safe_globals.apply(torch.serialization)
    torch_safe_globals.apply(torch.serialization)
    assert len(torch.serialization.get_safe_globals()) == len(safe)
    for func in torch_safe_globals.VIEW_REBUILDERS:
        assert func in safe
