"""The six dict view types pickle, copy and deep-copy, in-process.

Every path: the C pickler and the pure-Python ``pickle._Pickler``/``_Unpickler`` with each
protocol 0-5, ``multiprocessing.reduction.ForkingPickler``, ``copy.copy``/``copy.deepcopy``;
views alone, nested in containers and objects, and views over dicts that hold views.
"""
import copy
import copyreg
import dataclasses
import io
import pickle
import pickletools
from collections import OrderedDict
from multiprocessing.reduction import ForkingPickler

import numpy
import pytest

import mpcompat
from mpcompat import rebuild_views
from mpcompat import activation
from workers import VIEW_KINDS, canon, make_view, view_types

# pickle._Pickler as the standard library has it, even if dill was imported
pytestmark = pytest.mark.usefixtures("stdlib_python_pickler")

PROTOCOLS = list(range(0, pickle.HIGHEST_PROTOCOL + 1))
TYPES = view_types()
SECRET = "SECRET-MARKER-\u00e9\u4e2d-7f3a"

PAIRS = [("alpha", 1), (2, [3, "four", {"five": (6.5, None)}]), ((7, "eight"), "nine \u2603"),
         (None, 2 ** 100), ("", b"bytes\x00")]


def c_roundtrip(obj, protocol):
    data = pickle.dumps(obj, protocol)
    return pickle.loads(data), data


def py_roundtrip(obj, protocol):
    buf = io.BytesIO()
    pickle._Pickler(buf, protocol).dump(obj)
    data = buf.getvalue()
    return pickle._Unpickler(io.BytesIO(data)).load(), data


def forking_roundtrip(obj):
    data = bytes(ForkingPickler.dumps(obj))
    return ForkingPickler.loads(data), data


PICKLERS = {"C": c_roundtrip, "python": py_roundtrip}


def test_six_types_are_registered_by_exact_type():
    table = mpcompat.registered()
    assert len(set(TYPES.values())) == 6
    for kind, cls in TYPES.items():
        assert cls.__name__ == kind
        assert table[cls] is copyreg.dispatch_table[cls]
        assert table[cls] is activation.VIEW_REDUCERS[cls]
        assert table[cls].__name__ == "reduce_" + kind
    # odict views subclass dict views: each still has its own exact entry
    assert issubclass(TYPES["odict_keys"], TYPES["dict_keys"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("pickler", sorted(PICKLERS))
@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_roundtrip_type_order_contents(kind, pickler, protocol):
    view = make_view(kind, PAIRS)
    loaded, data = PICKLERS[pickler](view, protocol)
    assert type(loaded) is TYPES[kind]
    assert canon(loaded) == canon(view)
    assert list(loaded) == list(view)


def _globals(data):
    """The (module, name) pairs a pickle imports."""
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL":
            found.add(tuple(strings[-2:]))
    return found


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_pickle_names_only_the_stable_rebuild_function(kind, protocol):
    data = pickle.dumps(make_view(kind, [("k", "v")]), protocol)
    assert _globals(data) == {("mpcompat.rebuild_views", "rebuild_" + kind)}
    assert getattr(rebuild_views, "rebuild_" + kind).__module__ == "mpcompat.rebuild_views"


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_empty_views(kind):
    view = make_view(kind, [])
    for protocol in PROTOCOLS:
        for roundtrip in PICKLERS.values():
            loaded, _ = roundtrip(view, protocol)
            assert type(loaded) is TYPES[kind] and list(loaded) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("pickler", sorted(PICKLERS))
@pytest.mark.parametrize("prefix", ["dict", "odict"])
def test_keys_view_ships_no_values(prefix, pickler, protocol):
    view = make_view(prefix + "_keys", [("k1", SECRET), ("k2", [SECRET * 2]), ("k3", 12345678)])
    loaded, data = PICKLERS[pickler](view, protocol)
    assert list(loaded) == ["k1", "k2", "k3"]
    assert b"k1" in data and b"k3" in data
    assert SECRET.encode("utf-8") not in data
    assert SECRET.encode("raw_unicode_escape") not in data  # protocol 0 text form
    assert b"7f3a" not in data and b"12345678" not in data
    assert (12345678).to_bytes(4, "little") not in data


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("pickler", sorted(PICKLERS))
@pytest.mark.parametrize("prefix", ["dict", "odict"])
def test_values_view_ships_no_keys(prefix, pickler, protocol):
    view = make_view(prefix + "_values", [(SECRET, "v1"), ((SECRET, 2), "v2"), (87654321, "v3")])
    loaded, data = PICKLERS[pickler](view, protocol)
    assert list(loaded) == ["v1", "v2", "v3"]
    assert b"v1" in data and b"v3" in data
    assert b"7f3a" not in data and b"87654321" not in data
    assert (87654321).to_bytes(4, "little") not in data


def test_leak_check_detects_a_leak():
    """The byte checks above can fail: a pickle of the whole dict does contain the marker."""
    data = pickle.dumps({"k1": SECRET}, 0)
    assert b"7f3a" in data
    data = pickle.dumps({87654321: "v"}, 0)
    assert b"87654321" in data


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_forking_pickler(kind):
    view = make_view(kind, PAIRS)
    loaded, data = forking_roundtrip(view)
    assert type(loaded) is TYPES[kind]
    assert canon(loaded) == canon(view)
    # ForkingPickler copies copyreg's table at __init__: a pickler made after registration
    # uses mpcompat's reducer through its own table.
    buf = io.BytesIO()
    ForkingPickler(buf).dump(view)
    assert buf.getvalue() == data
    assert ("mpcompat.rebuild_views", "rebuild_" + kind) in _globals(data)


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_copy_is_shallow_and_keeps_type(kind):
    inner = ["mutable"]
    view = make_view(kind, [("a", inner), ("b", 2)])
    copied = copy.copy(view)
    assert type(copied) is TYPES[kind]
    assert copied is not view
    assert canon(copied) == canon(view)
    if kind.endswith("_values"):
        assert next(iter(copied)) is inner
    if kind.endswith("_items"):
        assert next(iter(copied))[1] is inner


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_deepcopy_copies_contents(kind):
    inner = ["mutable", {"x": 1}]
    view = make_view(kind, [((1, 2), inner), ("b", {"c": inner})])
    copied = copy.deepcopy(view)
    assert type(copied) is TYPES[kind]
    assert canon(copied) == canon(view)
    if kind.endswith("_values"):
        first, second = list(copied)
        assert first == inner and first is not inner
        assert second["c"] is first  # deepcopy's memo keeps shared references shared
    if kind.endswith("_items"):
        (_, first), (_, second) = list(copied)
        assert first is not inner and second["c"] is first


def test_deepcopy_inside_a_structure():
    inner = {"car": 1, "bus": 2}
    config = {"class_range": inner, "class_names": inner.keys(), "ranges": inner.values()}
    copied = copy.deepcopy(config)
    assert canon(copied) == canon(config)
    assert type(copied["class_names"]) is TYPES["dict_keys"]


# --- nesting --------------------------------------------------------------------------------

@dataclasses.dataclass
class Config(object):
    names: object
    ranges: object
    pairs: object
    extra: object = None


class Slotted(object):
    __slots__ = ("names", "items")

    def __init__(self, names, items):
        self.names = names
        self.items = items


def _all_views(pairs=PAIRS):
    return [make_view(kind, pairs) for kind in VIEW_KINDS]


def _nested_dict_of_views():
    """A dict whose values are views of other dicts: then views of that dict."""
    inner_a = {"car": 50, "truck": [40, 41]}
    inner_b = OrderedDict([("x", (1, 2)), ("y", "\u00fc")])
    outer = {"keys_a": inner_a.keys(), "values_a": inner_a.values(), "items_a": inner_a.items(),
             "keys_b": inner_b.keys(), "values_b": inner_b.values(), "items_b": inner_b.items()}
    outer_od = OrderedDict(outer)
    return [outer, outer.values(), outer.items(), outer.keys(),
            outer_od.values(), outer_od.items(), {"deeper": outer.values()}.items()]


def nested_cases():
    arr = numpy.empty(len(VIEW_KINDS), dtype=object)
    for i, view in enumerate(_all_views()):
        arr[i] = view
    return {
        "list": _all_views(),
        "tuple": tuple(_all_views()),
        "dict": dict(zip(VIEW_KINDS, _all_views())),
        "dict_holding_a_values_view": {("k", 1): make_view("dict_values", PAIRS)},
        "dataclass": Config(*_all_views()[:3], extra=[_all_views()[3:]]),
        "slots": Slotted(make_view("odict_keys", PAIRS), [make_view("dict_items", PAIRS)]),
        "numpy_object_array": arr,
        "views_of_views": _nested_dict_of_views(),
    }


def _canon_deep(obj):
    """canon() that also opens the dataclass, slots object and numpy array used above."""
    if isinstance(obj, Config):
        return ("Config", [_canon_deep(getattr(obj, f.name)) for f in dataclasses.fields(obj)])
    if isinstance(obj, Slotted):
        return ("Slotted", [_canon_deep(obj.names), _canon_deep(obj.items)])
    if type(obj).__name__ == "ndarray":
        return ("ndarray", str(obj.dtype), obj.shape, [_canon_deep(x) for x in obj.tolist()])
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return (type(obj).__name__, [_canon_deep(x) for x in obj])
    if type(obj) in (dict, OrderedDict):
        return (type(obj).__name__, [(canon(k), _canon_deep(v)) for k, v in obj.items()])
    if type(obj) in TYPES.values():
        return (type(obj).__name__, [_canon_deep(x) for x in obj])
    return canon(obj)


CASES = sorted(nested_cases())


def test_nested_canon_sees_the_views():
    """The comparison below is meaningful: losing a view type changes the description."""
    case = nested_cases()["views_of_views"]
    assert _canon_deep(case) != _canon_deep([list(v) if type(v) in TYPES.values() else v
                                             for v in case])
    text = repr(_canon_deep(nested_cases()))
    for kind in VIEW_KINDS:
        assert "'%s'" % kind in text


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("pickler", sorted(PICKLERS))
@pytest.mark.parametrize("case", CASES)
def test_nested_roundtrip(case, pickler, protocol):
    if case == "slots" and protocol < 2:
        with pytest.raises(TypeError, match="__slots__"):  # the standard library's own rule
            PICKLERS[pickler](nested_cases()[case], protocol)
        return
    obj = nested_cases()[case]
    loaded, _ = PICKLERS[pickler](obj, protocol)
    assert type(loaded) is type(obj)
    assert _canon_deep(loaded) == _canon_deep(obj)


@pytest.mark.parametrize("case", CASES)
def test_nested_forking_pickler_and_deepcopy(case):
    obj = nested_cases()[case]
    for loaded in (forking_roundtrip(obj)[0], copy.deepcopy(obj)):
        assert type(loaded) is type(obj)
        assert _canon_deep(loaded) == _canon_deep(obj)


@pytest.mark.parametrize("pickler", sorted(PICKLERS))
def test_shared_view_stays_shared(pickler):
    view = make_view("dict_keys", PAIRS)
    for protocol in PROTOCOLS:
        loaded, _ = PICKLERS[pickler]([view, {"again": view}], protocol)
        assert loaded[0] is loaded[1]["again"]
    copied = copy.deepcopy([view, view])
    assert copied[0] is copied[1]


def test_views_unpickled_with_their_dict_are_unlinked():
    """A documented choice (as cloudpickle's): the rebuilt view has a dict of its own."""
    d = {"a": 1}
    loaded_d, loaded_keys = pickle.loads(pickle.dumps((d, d.keys())))
    loaded_d["b"] = 2
    assert list(loaded_keys) == ["a"]


def test_without_mpcompat_views_do_not_pickle(restore_mpcompat):
    """The baseline the reducers fix: deactivated, every path refuses every view type."""
    mpcompat.deactivate()
    for kind in VIEW_KINDS:
        view = make_view(kind, PAIRS)
        with pytest.raises(TypeError, match=kind):
            pickle.dumps(view)
        with pytest.raises(TypeError, match=kind):
            py_roundtrip(view, 2)
        with pytest.raises(TypeError, match=kind):
            ForkingPickler.dumps(view)
        with pytest.raises(TypeError, match=kind):
            copy.deepcopy(view)
