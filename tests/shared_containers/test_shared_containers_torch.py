"""mpcompat.shared_list / shared_dict on torch's backend (a uint8 tensor in torch's shared
memory, the default once torch is imported): multiprocessing sends it through torch's own
reducers, by handle, under both sharing strategies; DataLoader workers (fork, spawn) read it."""
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing as torch_mp
import torch.utils.data as data

import mpcompat
from shared_containers_helpers import Chunks, keep, private_growth, records, summary

DATA = records(2000)


@pytest.fixture(scope="module")
def shared():
    return mpcompat.shared_list(DATA)


def test_torch_imported_means_torch_storage(shared):
    assert shared.backend == "torch" and shared._store.tensor.is_shared()
    assert "torch shared memory (%s)" % torch_mp.get_sharing_strategy() in repr(shared)
    assert shared == DATA and shared[-1] == DATA[-1] and shared[5:7] == DATA[5:7]
    with pytest.raises(TypeError, match="shared_list of 2,000 items is read-only: append"):
        shared.append({})
    mapping = mpcompat.shared_dict({"k%d" % i: i for i in range(100)})
    assert mapping.backend == "torch" and mapping["k7"] == 7 and len(mapping) == 100
    assert pickle.loads(pickle.dumps(shared)) == DATA  # the bytes, outside multiprocessing


def test_spawn_and_forkserver_children_read_by_handle(spawn_pool, forkserver_pool, shared):
    mapping = mpcompat.shared_dict({"a": [1], "b": None})
    assert len(bytes(ForkingPickler.dumps(shared))) < 1000 < shared.nbytes
    for pool in (spawn_pool, forkserver_pool):
        assert pool.apply(summary, (shared,)) == (
            "SharedList", "torch", 2000, DATA[0], DATA[-1], DATA[1:3], DATA)
        assert pool.apply(summary, (mapping,))[-1] == {"a": [1], "b": None}


def test_a_strategy_switched_later_sends_a_copy_and_keeps_ours(spawn_pool):
    shared = mpcompat.shared_list(DATA)
    before = torch_mp.get_sharing_strategy()
    other = "file_system" if before == "file_descriptor" else "file_descriptor"
    address = shared._store.tensor.data_ptr()
    torch_mp.set_sharing_strategy(other)
    try:
        assert spawn_pool.apply(summary, (shared,))[2:5] == (2000, DATA[0], DATA[-1])
    finally:
        torch_mp.set_sharing_strategy(before)
    assert shared._store.tensor.data_ptr() == address and shared == DATA
    assert set(shared._store.copies) == {other}


def test_a_spawn_child_reads_without_a_private_copy(spawn_pool):
    data = records(200000)
    size = len(pickle.dumps(data, pickle.HIGHEST_PROTOCOL))
    shared = mpcompat.shared_list(data)
    growth, read = spawn_pool.apply(private_growth, (bytes(ForkingPickler.dumps(shared)), 2,
                                                     ("torch",)))
    assert read == 400000 and growth < size / 10, (growth, size)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_read_a_shared_list(shared, method):
    loader = data.DataLoader(Chunks(shared, 250), batch_size=None, num_workers=2,
                             collate_fn=keep, multiprocessing_context=method)
    batches = list(loader)
    assert sorted(i for _, ids, _, _ in batches for i in ids) == list(range(2000))
    assert len({pid for pid, _, _, _ in batches}) == 2



def test_a_rebuilt_one_sends_it_on_knowing_how_it_came(spawn_pool, shared):
    """Rebuilt (here, as a child would), it keeps the strategy its tensor was sent with: sent
    on under the other strategy, it sends a copy and its own tensor stays where it is."""
    strategy = torch_mp.get_sharing_strategy()
    other = "file_system" if strategy == "file_descriptor" else "file_descriptor"
    sent = ForkingPickler.dumps(shared)
    torch_mp.set_sharing_strategy(other)  # a child whose strategy is not the sender's
    try:
        received = ForkingPickler.loads(sent)
        assert received._store.strategy == strategy and received == DATA
        address = received._store.tensor.data_ptr()
        assert spawn_pool.apply(summary, (received,))[2:5] == (2000, DATA[0], DATA[-1])
    finally:
        torch_mp.set_sharing_strategy(strategy)
    assert received._store.tensor.data_ptr() == address and received == DATA
    assert sorted(received._store.copies) == [other]
