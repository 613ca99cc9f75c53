"""The reducer registry: register, reducer, unregister, registered, registering."""
import copy
import copyreg
import io
import pickle
import random
import threading
import types
from multiprocessing.reduction import ForkingPickler

import pytest

import mpcompat
import workers
from testenv import race
from workers import Handle, canon, reduce_handle


# pickle._Pickler as the standard library has it, even if dill was imported
pytestmark = pytest.mark.usefixtures("stdlib_python_pickler")

class Local(object):
    def __init__(self, value):
        self.value = value


def rebuild_local(value):
    obj = Local(value)
    obj.via = "reducer"
    return obj


def reduce_local(obj):
    return rebuild_local, (obj.value,)


def other_reduce_local(obj):
    return rebuild_local, (("other", obj.value),)


def foreign_reduce_local(obj):
    return rebuild_local, (("foreign", obj.value),)


def _py_dumps(obj, protocol=2):
    buf = io.BytesIO()
    pickle._Pickler(buf, protocol).dump(obj)
    return buf.getvalue()


def _consistent():
    """registered() agrees with copyreg.dispatch_table."""
    table = mpcompat.registered()
    for cls, red in table.items():
        assert copyreg.dispatch_table.get(cls) is red, cls
    return table


# --- register / reducer / unregister --------------------------------------------------------

def test_register_applies_to_every_pickling_path(restore_mpcompat):
    assert mpcompat.register(Local, reduce_local) is reduce_local
    assert copyreg.dispatch_table[Local] is reduce_local
    assert mpcompat.registered()[Local] is reduce_local
    for data in (pickle.dumps(Local(1)), _py_dumps(Local(1)), bytes(ForkingPickler.dumps(Local(1)))):
        obj = pickle.loads(data)
        assert (obj.value, obj.via) == (1, "reducer")
    assert copy.deepcopy(Local([1])).via == "reducer"
    assert copy.copy(Local(2)).via == "reducer"


def test_reducer_decorator(restore_mpcompat):
    @mpcompat.reducer(Local)
    def reduce_it(obj):
        return rebuild_local, (obj.value * 2,)
    assert reduce_it.__name__ == "reduce_it"  # the decorator returns the function itself
    assert mpcompat.registered()[Local] is reduce_it
    assert pickle.loads(pickle.dumps(Local(21))).value == 42


def test_unregister_removes_the_entry(restore_mpcompat):
    mpcompat.register(Local, reduce_local)
    mpcompat.unregister(Local)
    assert Local not in copyreg.dispatch_table
    assert Local not in mpcompat.registered()
    assert not hasattr(pickle.loads(pickle.dumps(Local(1))), "via")
    with pytest.raises(ValueError, match="no reducer registered by mpcompat"):
        mpcompat.unregister(Local)


def test_unregister_restores_another_packages_entry(restore_mpcompat):
    copyreg.pickle(Local, foreign_reduce_local)
    with pytest.raises(ValueError, match="another package") as info:
        mpcompat.register(Local, reduce_local)
    assert str(info.value).startswith("cls ")  # names the argument
    assert "override=True" in str(info.value) and "Local" in str(info.value)
    assert copyreg.dispatch_table[Local] is foreign_reduce_local
    mpcompat.register(Local, reduce_local, override=True)
    assert copyreg.dispatch_table[Local] is reduce_local
    mpcompat.register(Local, other_reduce_local, override=True)  # replace ours again
    assert pickle.loads(pickle.dumps(Local(1))).value == ("other", 1)
    mpcompat.unregister(Local)
    assert copyreg.dispatch_table[Local] is foreign_reduce_local  # the first one, not ours
    assert Local not in mpcompat.registered()
    assert pickle.loads(pickle.dumps(Local(1))).value == ("foreign", 1)


def test_unregister_leaves_an_entry_made_over_ours(restore_mpcompat):
    mpcompat.register(Local, reduce_local)
    copyreg.pickle(Local, foreign_reduce_local)  # another package, after us
    mpcompat.unregister(Local)
    assert copyreg.dispatch_table[Local] is foreign_reduce_local


def test_registering_the_same_reducer_twice_is_a_no_op(restore_mpcompat):
    before = dict(copyreg.dispatch_table)
    mpcompat.register(Local, reduce_local)
    assert mpcompat.register(Local, reduce_local) is reduce_local
    assert mpcompat.reducer(Local)(reduce_local) is reduce_local
    assert dict(mpcompat.registered())[Local] is reduce_local
    mpcompat.unregister(Local)  # one unregister undoes it all
    assert dict(copyreg.dispatch_table) == before


def test_a_different_reducer_needs_override(restore_mpcompat):
    mpcompat.register(Local, reduce_local)
    with pytest.raises(ValueError, match="registered by mpcompat"):
        mpcompat.register(Local, other_reduce_local)
    assert copyreg.dispatch_table[Local] is reduce_local


def test_registered_is_a_read_only_mapping(restore_mpcompat):
    table = mpcompat.registered()
    assert isinstance(table, types.MappingProxyType)
    with pytest.raises(TypeError):
        table[Local] = reduce_local
    with pytest.raises(TypeError):
        del table[type({}.keys())]
    assert Local not in copyreg.dispatch_table
    mpcompat.register(Local, reduce_local)
    assert Local not in table  # a snapshot: later changes do not show through
    assert Local in mpcompat.registered()


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [Local(1), "Local", None, 3])
def test_cls_must_be_a_type(cls):
    for call in (lambda: mpcompat.register(cls, reduce_local), lambda: mpcompat.reducer(cls),
                 lambda: mpcompat.unregister(cls), lambda: mpcompat.registering({cls: reduce_local})):
        with pytest.raises(TypeError, match=r"\bcls\b.*type"):
            call()


@pytest.mark.parametrize("bad", [None, 42, "reduce_local", (rebuild_local, ())])
def test_reducer_must_be_callable(bad):
    with pytest.raises(TypeError, match=r"\breducer\b.*callable"):
        mpcompat.register(Local, bad)
    with pytest.raises(TypeError, match=r"\breducer\b.*callable"):
        mpcompat.reducer(Local)(bad)
    with pytest.raises(TypeError, match=r"\breducer\b.*callable"):
        mpcompat.registering({Local: bad})
    assert Local not in copyreg.dispatch_table


@pytest.mark.parametrize("cls", [int, dict, list, str, bytes, tuple, type(None), bool, float,
                                 type, types.FunctionType, set, frozenset, bytearray,
                                 pickle.PickleBuffer])
def test_types_pickle_never_dispatches_are_refused(cls):
    before = dict(copyreg.dispatch_table)
    with pytest.raises(ValueError, match=r"\bcls\b.*%s" % cls.__qualname__):
        mpcompat.register(cls, reduce_local)
    with pytest.raises(ValueError, match=r"\bcls\b"):
        mpcompat.register(cls, reduce_local, override=True)
    assert dict(copyreg.dispatch_table) == before


def test_refused_types_really_bypass_copyreg(restore_mpcompat):
    """Why those types are refused: an entry in copyreg would be ignored by the pickler."""
    copyreg.dispatch_table[int] = lambda i: (str, ("never used",))
    assert pickle.loads(pickle.dumps(5)) == 5
    del copyreg.dispatch_table[int]


# --- registering ----------------------------------------------------------------------------

def test_registering_restores_on_exit(restore_mpcompat):
    before = dict(copyreg.dispatch_table)
    with mpcompat.registering({Local: reduce_local, Handle: reduce_handle}) as table:
        assert table[Local] is reduce_local and table[Handle] is reduce_handle
        assert pickle.loads(pickle.dumps(Local(1))).via == "reducer"
    assert dict(copyreg.dispatch_table) == before
    assert Local not in mpcompat.registered() and Handle not in mpcompat.registered()


def test_registering_restores_when_the_block_raises(restore_mpcompat):
    copyreg.pickle(Local, foreign_reduce_local)
    before = dict(copyreg.dispatch_table)
    with pytest.raises(KeyError, match="boom"):
        with mpcompat.registering({Local: reduce_local}, override=True):
            assert copyreg.dispatch_table[Local] is reduce_local
            raise KeyError("boom")
    assert dict(copyreg.dispatch_table) == before
    assert copyreg.dispatch_table[Local] is foreign_reduce_local
    assert Local not in mpcompat.registered()


def test_registering_restores_a_previous_mpcompat_reducer(restore_mpcompat):
    mpcompat.register(Local, reduce_local)
    with mpcompat.registering({Local: other_reduce_local}, override=True):
        assert pickle.loads(pickle.dumps(Local(1))).value == ("other", 1)
    assert mpcompat.registered()[Local] is reduce_local
    assert copyreg.dispatch_table[Local] is reduce_local
    mpcompat.unregister(Local)
    assert Local not in copyreg.dispatch_table


def test_registering_that_fails_on_enter_changes_nothing(restore_mpcompat):
    copyreg.pickle(Handle, foreign_reduce_local)
    before = dict(copyreg.dispatch_table)
    with pytest.raises(ValueError, match="Handle"):
        with mpcompat.registering({Local: reduce_local, Handle: reduce_handle}):
            pass
    assert dict(copyreg.dispatch_table) == before
    assert Local not in mpcompat.registered()


# --- user reducers wherever built-in ones apply ---------------------------------------------

def test_user_reducer_through_forking_pickler_into_a_spawn_child(spawn_pool, restore_mpcompat):
    payload = {"ids": {"a": 1}.keys(), "nested": [1, (2, "\u00fc")]}
    handle = Handle("cam-front", payload)
    with pytest.raises(TypeError, match="lock"):
        ForkingPickler.dumps(handle)
    mpcompat.register(Handle, reduce_handle)
    loaded = ForkingPickler.loads(bytes(ForkingPickler.dumps(handle)))
    assert loaded.rebuilt and canon(loaded.payload) == canon(payload)
    # the pool sends the task with ForkingPickler; the child rebuilds with the user function
    report = spawn_pool.apply(workers.handle_report, (handle,))
    assert report == ("workers", "Handle", "cam-front", canon(payload), True, "lock")


def test_user_reducer_through_deepcopy(restore_mpcompat):
    handle = Handle("h", {"inner": [1, 2]})
    with pytest.raises(TypeError, match="lock"):
        copy.deepcopy(handle)
    with mpcompat.registering({Handle: reduce_handle}):
        copied = copy.deepcopy({"h": handle, "again": handle})
    assert copied["h"] is copied["again"] and copied["h"] is not handle
    assert copied["h"].rebuilt and copied["h"].payload == handle.payload
    assert copied["h"].payload is not handle.payload


# --- threads --------------------------------------------------------------------------------

def test_concurrent_register_and_unregister_leave_a_consistent_table(restore_mpcompat):
    classes = [type("Concurrent%d" % i, (object,), {}) for i in range(6)]
    reducers = [lambda obj: (object, ()), lambda obj: (dict, ())]
    n_threads, rounds = 8, 2000
    barrier = threading.Barrier(n_threads)
    errors = []

    def hammer(seed):
        rng = random.Random(seed)
        barrier.wait()
        for _ in range(rounds):
            cls = rng.choice(classes)
            try:
                action = rng.random()
                if action < 0.45:
                    mpcompat.register(cls, rng.choice(reducers), override=rng.random() < 0.5)
                elif action < 0.9:
                    mpcompat.unregister(cls)
                else:
                    dict(mpcompat.registered())  # readers run concurrently too
            except ValueError:
                pass  # already registered with another reducer / not registered: expected
            except Exception as exc:  # anything else is a bug
                errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(n_threads)]
    race(threads)
    assert errors == []
    table = _consistent()
    for cls in classes:
        if cls in table:
            assert copyreg.dispatch_table[cls] is table[cls]
            mpcompat.unregister(cls)
        assert cls not in copyreg.dispatch_table  # nothing stale left behind
    assert not set(classes) & set(mpcompat.registered())
