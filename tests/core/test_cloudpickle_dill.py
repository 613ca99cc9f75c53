"""cloudpickle and dill keep their own reducers for dict views: mpcompat changes nothing
in what they write (same bytes with mpcompat deactivated and active) and their pickles name
none of mpcompat's functions."""
import pickle
from collections import OrderedDict

import cloudpickle
import dill
import pytest

import mpcompat
from workers import VIEW_KINDS, canon, make_view

PAIRS = [("car", 50), ("v\u00e9lo", [1, None]), (2 ** 70, {"n": (1, 2)})]


def samples():
    inner = {"x": 1}
    outer = OrderedDict([("k", inner.keys()), ("v", inner.values()), ("i", inner.items())])
    cases = {kind: make_view(kind, PAIRS) for kind in VIEW_KINDS}
    cases["nested"] = {"views": [make_view(kind, PAIRS) for kind in VIEW_KINDS],
                       "outer_values": outer.values(), "outer_items": outer.items()}
    return cases


DUMPERS = {
    "cloudpickle": lambda obj, protocol: cloudpickle.dumps(obj, protocol),
    "dill": lambda obj, protocol: dill.dumps(obj, protocol),
}
LOADERS = {"cloudpickle": pickle.loads, "dill": dill.loads}


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("library", sorted(DUMPERS))
def test_same_bytes_with_mpcompat_deactivated_and_active(library, protocol, restore_mpcompat):
    dump = DUMPERS[library]
    mpcompat.deactivate()
    assert not mpcompat.is_active()
    without = {name: dump(obj, protocol) for name, obj in samples().items()}
    mpcompat.activate()
    assert mpcompat.is_active()
    with_ = {name: dump(obj, protocol) for name, obj in samples().items()}
    assert with_ == without
    for name, data in with_.items():
        assert b"mpcompat" not in data, name
        loaded = LOADERS[library](data)
        assert canon(loaded) == canon(samples()[name])


def test_mpcompat_differs_from_them():
    """The comparison above is not vacuous: the plain pickler's bytes do name mpcompat."""
    data = pickle.dumps(make_view("dict_keys", PAIRS))
    assert b"mpcompat" in data
    assert data != cloudpickle.dumps(make_view("dict_keys", PAIRS))
