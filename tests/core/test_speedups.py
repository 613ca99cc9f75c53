"""The C view reducers (``mpcompat._speedups``): in use wherever they are built, the same
pickles as the pure-Python reducers, and a cache of argument tuples that matches by identity
only and keeps nothing alive after pickling.

The rest of tests/core runs against whichever reducers are in use; ``.ci/test`` runs it once
more with ``MPCOMPAT_NO_SPEEDUPS=1`` for the pure-Python ones.
"""
import copyreg
import gc
import pickle
import threading
import weakref
from collections import OrderedDict

import pytest

import mpcompat
from mpcompat import rebuild
from mpcompat.activation import env_flag
from testenv import child_env, run_python

PURE = env_flag("MPCOMPAT_NO_SPEEDUPS")
KEYS_KINDS = {"dict_keys": dict, "odict_keys": OrderedDict}

c_only = pytest.mark.skipif(PURE, reason="MPCOMPAT_NO_SPEEDUPS is set: this run tests the "
                                         "pure-Python reducers")


class Name(str):
    """A str subclass: equal to, and hashed like, the plain str of the same text."""


class Key(object):
    """A key object that a weak reference can watch."""


def fresh(text):
    """A str equal to ``text`` but not the same object as any other."""
    return "".join(list(text))


@pytest.fixture
def speedups(restore_mpcompat):
    """The C module with an empty cache."""
    from mpcompat import _speedups
    _speedups.clear_cache()
    yield _speedups
    _speedups.clear_cache()


def test_the_extension_is_in_use_unless_turned_off():
    """CI builds the extension for every Python it tests: no silent fallback."""
    text = str(mpcompat.status())
    if PURE:
        assert rebuild.SPEEDUPS.startswith("pure Python (MPCOMPAT_NO_SPEEDUPS=")
        assert rebuild.VIEW_REDUCERS == rebuild.PYTHON_VIEW_REDUCERS
    else:
        from mpcompat import _speedups
        assert rebuild.SPEEDUPS == "C (mpcompat._speedups)"
        for kind in ("dict_keys", "dict_values", "odict_keys", "odict_values"):
            cls = getattr(rebuild, kind.upper())
            assert rebuild.VIEW_REDUCERS[cls] is getattr(_speedups, "reduce_" + kind)
            assert mpcompat.registered()[cls] is getattr(_speedups, "reduce_" + kind)
        assert "mpcompat._speedups.reduce_dict_keys" in text
    assert "view reducers: %s" % rebuild.SPEEDUPS in text


def test_turned_off_in_a_child_the_pure_python_reducers_work():
    code = ("import pickle, mpcompat; from mpcompat import rebuild; "
            "v = pickle.loads(pickle.dumps({'a': 1, 'b': 2}.keys())); "
            "print(rebuild.SPEEDUPS, list(v), "
            "mpcompat.registered()[type(v)] is rebuild.reduce_dict_keys)")
    proc = run_python(code, env=child_env(MPCOMPAT_NO_SPEEDUPS="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "pure Python (MPCOMPAT_NO_SPEEDUPS=1) ['a', 'b'] True\n"


@c_only
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("kind", ["dict_keys", "dict_values", "odict_keys", "odict_values"])
def test_same_pickle_as_the_pure_python_reducer(speedups, kind, protocol):
    cls = getattr(rebuild, kind.upper())
    mapping = (OrderedDict if kind.startswith("odict") else dict)(
        [("a", 1), ((2, "b"), [3]), (None, "c")])
    view = getattr(mapping, kind.split("_")[1])()
    c_pickle = pickle.dumps(view, protocol)
    copyreg.pickle(cls, rebuild.PYTHON_VIEW_REDUCERS[cls])
    assert pickle.dumps(view, protocol) == c_pickle


@c_only
@pytest.mark.parametrize("kind", sorted(KEYS_KINDS))
def test_views_over_the_same_key_objects_share_one_tuple(speedups, kind):
    names = ["class_%d" % i for i in range(10)]
    views = [KEYS_KINDS[kind]((name, i) for name in names).keys() for i in range(50)]
    data = pickle.dumps(views, 5)
    assert speedups.cache_info()["hits"] == 49
    loaded = pickle.loads(data)
    assert [type(v) for v in loaded] == [type(views[0])] * 50
    assert all(list(v) == names for v in loaded)
    # the tuple went in once: every later view refers to it
    assert len(data) < 2 * len(pickle.dumps(views[:1], 5)) + 50 * 20


@c_only
@pytest.mark.parametrize("kind", sorted(KEYS_KINDS))
def test_equal_but_distinct_keys_stay_distinct(speedups, kind):
    """The cache matches by identity: equal strings that are different objects, and a str
    subclass equal to a str, come back as they went in."""

    first, second, third = fresh("car"), fresh("car"), Name("car")
    assert first == second == third and first is not second
    views = [KEYS_KINDS[kind].fromkeys([key, "bus"]).keys() for key in (first, second, third)]
    loaded = pickle.loads(pickle.dumps([views, first, second, third], 5))
    got_views, got_first, got_second, got_third = loaded
    assert [list(v)[0] for v in got_views] == [got_first, got_second, got_third]
    assert list(got_views[0])[0] is got_first
    assert list(got_views[1])[0] is got_second and got_second is not got_first
    assert type(list(got_views[2])[0]) is Name
    assert speedups.cache_info()["hits"] == 0


@c_only
def test_a_changed_dict_pickles_its_current_keys(speedups):
    mapping = {"a": 1, "b": 2}
    assert list(pickle.loads(pickle.dumps(mapping.keys()))) == ["a", "b"]
    mapping["c"] = 3
    del mapping["a"]
    assert list(pickle.loads(pickle.dumps(mapping.keys()))) == ["b", "c"]


@c_only
def test_odict_keys_keep_the_odict_order(speedups):
    od = OrderedDict.fromkeys(["a", "b", "c"])
    od.move_to_end("a")
    plain = dict.fromkeys(["a", "b", "c"])
    loaded = pickle.loads(pickle.dumps([od.keys(), plain.keys()]))
    assert [list(v) for v in loaded] == [["b", "c", "a"], ["a", "b", "c"]]
    assert [type(v) for v in loaded] == [type(od.keys()), type(plain.keys())]


@c_only
def test_nothing_stays_alive_after_pickling(speedups):
    key = Key()
    ref = weakref.ref(key)
    mapping = {key: 1, "other": 2}
    data = pickle.dumps([mapping.keys(), mapping.keys()])
    assert speedups.cache_info()["size"] == 1
    del mapping, key
    gc.collect()  # mpcompat drops idle cached tuples after each collection
    assert ref() is None
    assert speedups.cache_info()["size"] == 0
    assert len(pickle.loads(data)[0]) == 2


@c_only
def test_the_cache_is_bounded_and_skips_large_views(speedups):
    info = speedups.cache_info()
    gc.disable()  # no idle release: only the bound holds the size down
    try:
        for i in range(4 * info["slots"]):
            pickle.dumps({fresh("k%d" % i): 1}.keys())
        assert 0 < speedups.cache_info()["size"] <= info["slots"]
        speedups.clear_cache()
        large = dict.fromkeys(range(info["max_len"] + 1))
        assert list(pickle.loads(pickle.dumps(large.keys()))) == list(large)
        assert speedups.cache_info() == dict(info, size=0, hits=0, misses=0)
    finally:
        gc.enable()


@c_only
def test_deactivate_empties_the_cache(speedups):
    pickle.dumps({"a": 1}.keys())
    assert speedups.cache_info()["size"] == 1
    mpcompat.deactivate()
    assert speedups.cache_info()["size"] == 0


@c_only
def test_bad_input(speedups):
    with pytest.raises(TypeError, match="dict_values must be callable, not int"):
        speedups.bind(rebuild.rebuild_dict_keys, 5, rebuild.rebuild_odict_keys,
                      rebuild.rebuild_odict_values)
    # a failed bind changes nothing
    assert pickle.loads(pickle.dumps({"a": 1}.values())) is not None
    with pytest.raises(TypeError, match="not iterable"):
        speedups.reduce_dict_keys(5)
    func, args = speedups.reduce_dict_keys({"x": 1}.keys())
    assert func is rebuild.rebuild_dict_keys and args == ("x",)


@c_only
def test_threads_pickling_at_once_get_their_own_keys(speedups):
    shared = ["s%d" % i for i in range(8)]
    errors = []

    def work(tid):
        try:
            for i in range(300):
                own = [fresh("t%d-%d" % (tid, i % 7))] + shared[: i % 8]
                views = [dict.fromkeys(own).keys(), dict.fromkeys(shared).keys()]
                loaded = pickle.loads(pickle.dumps(views))
                assert [list(v) for v in loaded] == [own, shared]
                if i % 50 == 0:
                    gc.collect()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@c_only
def test_idle_tuples_go_at_the_end_of_a_collection_only(speedups):
    pickle.dumps({fresh("idle"): 1}.keys())
    assert speedups.cache_info()["size"] == 1
    speedups.release_idle("start", {})
    assert speedups.cache_info()["size"] == 1
    speedups.release_idle("stop", {})
    assert speedups.cache_info()["size"] == 0
