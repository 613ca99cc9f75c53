"""torch.safe_globals on real torch (2.6.0, 2.13.0, 2.14.1 in CI): torch.load(weights_only=True)
of a checkpoint with dict views; only the six view rebuilders are allowlisted; revert keeps what
others added. torch 2.4's way (a list, no remover) is checked on a stand-in built as torch 2.4.0's
``_weights_only_unpickler`` is.

Runs only where torch >= 2.4 is installed: older torch has no weights_only loading and no safe
globals (there the patch is "not needed": tests/old_stack/test_quiet_old_stack.py).
"""
import collections
import io
import pickle
import types
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
    active = list(torch.serialization.get_safe_globals())  # torch 2.4: the list itself
    mpcompat.deactivate()
    others = list(torch.serialization.get_safe_globals())
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


@pytest.mark.skipif(not hasattr(torch.serialization, "safe_globals"),
                    reason="torch.serialization.safe_globals is new in torch 2.5 (2.4: the "
                           "stand-in test below)")
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


def torch24_serialization():
    """A stand-in for torch 2.4.0's torch.serialization: its safe globals are the module-level
    list ``_weights_only_unpickler._marked_safe_globals_list``, which ``_add_safe_globals``
    extends (``+=``) and ``_clear_safe_globals`` replaces; there is no ``_remove_safe_globals``
    and no ``safe_globals`` context manager."""
    unpickler = types.SimpleNamespace(_marked_safe_globals_list=[])

    def add_safe_globals(safe_globals):
        unpickler._marked_safe_globals_list += safe_globals

    return types.SimpleNamespace(
        _weights_only_unpickler=unpickler, add_safe_globals=add_safe_globals,
        get_safe_globals=lambda: unpickler._marked_safe_globals_list)


def test_torch_2_4_list_gets_the_six_and_loses_only_them(monkeypatch):
    monkeypatch.setattr(torch_safe_globals, "_added", [])
    module = torch24_serialization()
    users_own, also_users = object(), rebuild_views.rebuild_dict_keys
    module.add_safe_globals([users_own, also_users])
    entries = module.get_safe_globals()
    torch_safe_globals.apply(module)
    torch_safe_globals.apply(module)  # again: nothing added twice
    assert len(entries) == 2 + 5 and entries[:2] == [users_own, also_users]
    assert all(f in entries for f in torch_safe_globals.VIEW_REBUILDERS)
    module.add_safe_globals([rebuild_views.rebuild_dict_values])  # the user's, after ours
    torch_safe_globals.revert(module)
    assert module.get_safe_globals() is entries  # the same list, changed in place
    assert entries == [users_own, also_users, rebuild_views.rebuild_dict_values]
    torch_safe_globals.revert(module)  # nothing left of ours: nothing changes
    assert entries == [users_own, also_users, rebuild_views.rebuild_dict_values]


def test_a_torch_without_a_remover_or_list_is_skipped(monkeypatch):
    from mpcompat.patcher import Skip
    monkeypatch.setattr(torch_safe_globals, "_added", [])
    module = torch24_serialization()
    module._weights_only_unpickler = types.SimpleNamespace()  # neither list nor remover
    with pytest.raises(Skip, match="cannot remove again"):
        torch_safe_globals.apply(module)
    del module.add_safe_globals
    with pytest.raises(Skip, match="no add_safe_globals"):
        torch_safe_globals.apply(module)
    assert torch_safe_globals._added == []
