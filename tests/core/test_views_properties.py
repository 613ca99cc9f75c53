"""Property tests: any dict of (nested) keys and values round-trips through every view type,
the C and pure-Python picklers at several protocols, ForkingPickler and copy.deepcopy."""
import copy
import io
import pickle
from collections import OrderedDict
from multiprocessing.reduction import ForkingPickler

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpcompat  # noqa: F401  (activates)
from workers import VIEW_KINDS, canon, make_view, view_types

# pickle._Pickler as the standard library has it, even if dill was imported
pytestmark = pytest.mark.usefixtures("stdlib_python_pickler")

TYPES = view_types()
SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2 ** 300), max_value=2 ** 300),  # large ints
    st.floats(allow_nan=False),
    st.text(max_size=12),  # any unicode, surrogates included
    st.binary(max_size=12),
)
hashables = st.recursive(
    atoms, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6)


def _containers(inner):
    return st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(hashables, inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3).map(OrderedDict),
        # views nested among the values, of every kind
        st.tuples(st.sampled_from(VIEW_KINDS),
                  st.lists(st.tuples(hashables, inner), max_size=3)).map(
                      lambda kp: make_view(kp[0], kp[1])),
    )


values = st.recursive(atoms, _containers, max_leaves=12)
views = st.tuples(st.sampled_from(VIEW_KINDS),
                  st.lists(st.tuples(hashables, values), max_size=6))


def _py_roundtrip(obj, protocol):
    buf = io.BytesIO()
    pickle._Pickler(buf, protocol).dump(obj)
    return pickle._Unpickler(io.BytesIO(buf.getvalue())).load()


def _check(kind, original, loaded):
    assert type(loaded) is TYPES[kind]
    assert canon(loaded) == canon(original)


@SETTINGS
@given(views, st.sampled_from([0, 2, 4, 5]), st.booleans())
def test_pickle_roundtrip(kind_pairs, protocol, python_pickler):
    kind, pairs = kind_pairs
    view = make_view(kind, pairs)
    if python_pickler:
        loaded = _py_roundtrip(view, protocol)
    else:
        loaded = pickle.loads(pickle.dumps(view, protocol))
    _check(kind, view, loaded)


@SETTINGS
@given(views)
def test_forking_pickler_and_deepcopy(kind_pairs):
    kind, pairs = kind_pairs
    view = make_view(kind, pairs)
    _check(kind, view, ForkingPickler.loads(ForkingPickler.dumps(view)))
    _check(kind, view, copy.deepcopy(view))
    _check(kind, view, copy.copy(view))


@SETTINGS
@given(st.lists(views, max_size=4), st.sampled_from([1, 3, 5]))
def test_views_nested_in_a_container(kind_pairs_list, protocol):
    obj = {"views": [make_view(kind, pairs) for kind, pairs in kind_pairs_list]}
    obj["of_views"] = dict(enumerate(obj["views"])).values()
    loaded = pickle.loads(pickle.dumps(obj, protocol))
    assert canon(loaded) == canon(obj)
    assert canon(copy.deepcopy(obj)) == canon(obj)
