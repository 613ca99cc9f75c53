"""mpcompat.shared_list / shared_dict on the standard library's backend
(``multiprocessing.shared_memory``): the read API, the errors on writes, pickling (a handle for
multiprocessing, the bytes otherwise), spawn and forkserver children reading without a copy,
and nothing left in /dev/shm after the owner ends."""
import copy
import gc
import os
import pickle
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler

import pytest

import mpcompat
from shared_containers_helpers import private_growth, records, summary
from testenv import child_env, run_python

SHM = "shared_memory"
DATA = records(500)
MAPPING = {"a": 1, 2: [3], (1, "x"): None, None: {"n": 5}, 1.5: "f", b"k": 0, frozenset([1]): 7}


@pytest.fixture(scope="module")
def shared():
    return mpcompat.shared_list(DATA, backend=SHM)


@pytest.fixture(scope="module")
def shared_map():
    return mpcompat.shared_dict(MAPPING, backend=SHM)


class Index(object):
    def __index__(self):
        return 3


def test_a_shared_list_reads_like_the_list(shared):
    assert len(shared) == 500 and bool(shared) and shared.backend == SHM
    assert shared[0] == DATA[0] and shared[-1] == DATA[-1] and shared[-500] == DATA[0]
    assert shared[Index()] == DATA[3]
    assert shared[1:3] == DATA[1:3] and type(shared[1:3]) is list
    assert shared[::-7] == DATA[::-7] and shared[10:2] == []
    assert list(shared) == DATA and list(reversed(shared)) == DATA[::-1]
    assert DATA[7] in shared and {"id": -1} not in shared
    assert shared.index(DATA[9]) == 9 and shared.count(DATA[9]) == 1
    assert shared == DATA and DATA == shared and not shared != DATA
    assert shared != DATA[:-1] and shared != DATA[:-1] + [{}] and shared != tuple(DATA)
    assert shared + [1] == DATA + [1] and [1] + shared == [1] + DATA
    assert sum([shared, shared], []) == DATA + DATA  # mmdet's ConcatDataset.evaluate
    assert shared.copy() == DATA and type(shared.copy()) is list
    for bad, error in ((500, IndexError), (-501, IndexError), ("1", TypeError)):
        with pytest.raises(error, match="shared_list ind"):
            shared[bad]
    empty = mpcompat.shared_list([], backend=SHM)
    assert len(empty) == 0 and not empty and empty == [] and list(empty) == []


def test_each_read_is_a_fresh_copy(shared):
    item = shared[4]
    item["tags"].append("mine")
    item["id"] = "changed"
    assert shared[4] == DATA[4] and shared[4] is not shared[4]


def test_the_repr_says_what_it_is(shared, shared_map):
    text = repr(shared)
    assert text.startswith("<shared_list of 500 items, ") and "shared memory psm" in text
    assert repr(DATA[0])[:40] in text and text.endswith(", ...]>")
    assert repr(shared_map).startswith("<shared_dict of 7 items") and "'a': 1" in repr(shared_map)


@pytest.mark.parametrize("write", [
    lambda c: c.__setitem__(0, 1), lambda c: c.__delitem__(0), lambda c: c.append(1),
    lambda c: c.extend([1]), lambda c: c.insert(0, 1), lambda c: c.pop(), lambda c: c.remove(1),
    lambda c: c.clear(), lambda c: c.sort(), lambda c: c.reverse()])
def test_writing_a_shared_list_raises_naming_it(shared, write):
    with pytest.raises(TypeError, match=r"^shared_list of 500 items is read-only: \w+\(\) "
                                        r"cannot change it.*make a list\(\.\.\.\) copy"):
        write(shared)
    assert shared == DATA


def test_augmented_assignment_raises_and_keeps_the_name(shared):
    alias = shared
    with pytest.raises(TypeError, match="read-only: __iadd__"):
        alias += [1]
    assert alias is shared


def test_a_shared_dict_reads_like_the_dict(shared_map):
    d = shared_map
    assert len(d) == 7 and d == MAPPING and MAPPING == d and dict(d) == MAPPING
    assert list(d) == list(MAPPING) and list(d.keys()) == list(MAPPING)
    assert list(d.values()) == list(MAPPING.values())
    assert list(d.items()) == list(MAPPING.items()) and d.copy() == MAPPING
    assert d["a"] == 1 and d[2.0] == [3] and d[(1, "x")] is None and d[None] == {"n": 5}
    assert d[1.5] == "f" and d[b"k"] == 0 and d[frozenset([1])] == 7
    assert "a" in d and "b" not in d and 3 not in d and object() not in d
    assert d.get("zz") is None and d.get("zz", 9) == 9 and d.get(2) == [3]
    assert ("a", 1) in d.items() and d.keys() == set(MAPPING)
    with pytest.raises(KeyError):
        d["missing"]
    with pytest.raises(TypeError, match="unhashable"):
        d[["a"]]
    value = d[None]
    value["n"] = 6
    assert d[None] == {"n": 5}
    numbers = mpcompat.shared_dict({1: "one", "1": "str"}, backend=SHM)
    assert numbers[True] == numbers[1.0] == "one" and numbers["1"] == "str"
    assert mpcompat.shared_dict([("x", 1)], backend=SHM) == {"x": 1}
    assert mpcompat.shared_dict({}, backend=SHM) == {} and "x" not in mpcompat.shared_dict()


def test_a_shared_dict_of_many_keys_finds_each(shared_map):
    big = {"%x" % i: i for i in range(5000)}
    shared = mpcompat.shared_dict(big, backend=SHM)
    assert all(shared[key] == value for key, value in big.items()) and "-1" not in shared


def test_shared_dict_keys_must_hash_alike_in_every_process():
    with pytest.raises(TypeError, match="shared_dict keys must be str, bytes, numbers.*key "
                                        "<object object at .*> is a object"):
        mpcompat.shared_dict({object(): 1}, backend=SHM)


@pytest.mark.parametrize("write", [
    lambda c: c.__setitem__("a", 1), lambda c: c.__delitem__("a"), lambda c: c.pop("a"),
    lambda c: c.popitem(), lambda c: c.clear(), lambda c: c.update(a=2),
    lambda c: c.setdefault("a", 2)])
def test_writing_a_shared_dict_raises_naming_it(shared_map, write):
    with pytest.raises(TypeError, match=r"^shared_dict of 7 items is read-only: .*dict\(\.\.\.\)"):
        write(shared_map)
    assert shared_map == MAPPING


def test_plain_pickle_and_copy(shared, shared_map):
    assert copy.copy(shared) is shared and copy.deepcopy([shared])[0] is shared
    for container, plain in ((shared, DATA), (shared_map, MAPPING)):
        loaded = pickle.loads(pickle.dumps(container))  # the bytes: loads anywhere, anytime
        assert type(loaded) is type(container) and loaded == plain
        assert loaded._store is not container._store  # a new owner (of the default backend)


def test_multiprocessing_pickles_a_handle(shared, shared_map):
    big = mpcompat.shared_list(records(20000), backend=SHM)
    for container in (shared, shared_map, big):
        handle = bytes(ForkingPickler.dumps(container))
        assert len(handle) < 300 and container._store.name.encode() in handle
        loaded = pickle.loads(handle)
        assert loaded == container and loaded._store.name == container._store.name
        assert loaded._store.view.readonly


def test_spawn_and_forkserver_children_read_by_handle(spawn_pool, forkserver_pool, shared,
                                                      shared_map):
    for pool in (spawn_pool, forkserver_pool):
        assert pool.apply(summary, (shared,)) == (
            "SharedList", SHM, 500, DATA[0], DATA[-1], DATA[1:3], DATA)
        assert pool.apply(summary, (shared_map,)) == (
            "SharedDict", SHM, 7, [MAPPING["a"], MAPPING[2]], MAPPING)


def test_a_spawn_child_reads_without_a_private_copy(spawn_pool):
    """The same 200,000 records, sent to a spawn child as a plain list and as a shared list:
    read twice there, the plain list costs the child its own copy, the shared list next to
    nothing (its pages are the owner's)."""
    data = records(200000)
    size = len(pickle.dumps(data, pickle.HIGHEST_PROTOCOL))  # far less than the objects
    shared = mpcompat.shared_list(data, backend=SHM)
    plain_growth, read = spawn_pool.apply(private_growth, (pickle.dumps(data),))
    handle = bytes(ForkingPickler.dumps(shared))
    shared_growth, read_shared = spawn_pool.apply(private_growth, (handle,))
    assert read == read_shared == 400000
    assert plain_growth > size, (plain_growth, size)
    assert shared_growth < size / 10, (shared_growth, size)


def test_collected_owner_unlinks_its_segment():
    shared = mpcompat.shared_list(DATA, backend=SHM)
    path = "/dev/shm/" + shared._store.name
    assert os.path.exists(path)
    del shared
    gc.collect()
    assert not os.path.exists(path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_forked_child_that_drops_it_leaves_the_owner_s_segment(shared):
    path = "/dev/shm/" + shared._store.name
    pid = os.fork()
    if pid == 0:  # the child drops the container and ends through sys.exit (atexit)
        try:
            scope = {"c": mpcompat.shared_list(shared, backend=SHM)}
            scope.clear()
            gc.collect()
        finally:
            os._exit(0 if os.path.exists(path) else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert os.path.exists(path) and shared[3] == DATA[3]


CLEANUP = textwrap.dedent('''
    import multiprocessing, os, signal, sys, time
    import mpcompat
    from shared_containers_helpers import records

    def hold(shared, ready):
        ready.set()
        assert shared[5]["id"] == 5
        time.sleep(60)

    if __name__ == "__main__":
        shared = mpcompat.shared_list(records(1000), backend="shared_memory")
        print(shared._store.name, flush=True)
        ctx = multiprocessing.get_context(sys.argv[1])
        ready = ctx.Event()
        child = ctx.Process(target=hold, args=(shared, ready))
        child.start()
        assert ready.wait(60)
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert os.path.exists("/dev/shm/" + shared._store.name)
        if sys.argv[2] == "kill-owner":
            os.kill(os.getpid(), signal.SIGKILL)
''')


def _cleanup(tmp_path, *args):
    script = tmp_path / "cleanup.py"
    script.write_text(CLEANUP)
    return subprocess.run([sys.executable, str(script)] + list(args), env=child_env(),
                          cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_nothing_is_left_in_dev_shm_when_a_child_was_killed(tmp_path, method):
    done = _cleanup(tmp_path, method, "end")
    assert done.returncode == 0, done.stderr
    name = done.stdout.split()[0]
    assert name.startswith("psm_") and not os.path.exists("/dev/shm/" + name)
    assert "leaked" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr


def test_a_killed_owner_s_segment_is_removed_by_the_resource_tracker(tmp_path):
    killed = _cleanup(tmp_path, "spawn", "kill-owner")
    assert killed.returncode == -9, killed.stderr
    name = killed.stdout.split()[0]
    # The tracker sees its last client gone, removes the segment and warns (its own words).
    assert not os.path.exists("/dev/shm/" + name)
    assert "leaked shared_memory" in killed.stderr


def test_import_mpcompat_does_not_load_the_module():
    done = run_python("import sys, mpcompat; print('mpcompat.shared_containers' in sys.modules);"
                      "mpcompat.shared_dict; print('mpcompat.shared_containers' in sys.modules)")
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_the_default_backend_is_shared_memory_without_torch():
    done = run_python("import sys, mpcompat; print(mpcompat.shared_list([1]).backend, "
                      "'torch' in sys.modules)")
    assert done.stdout.split() == ["shared_memory", "False"], done.stderr
    with pytest.raises(ValueError, match="backend must be one of"):
        mpcompat.shared_list([1], backend="numpy")


if sys.platform != "linux":  # /dev/shm and /proc/PID/smaps_rollup
    pytestmark = pytest.mark.skip(reason="Linux only")
