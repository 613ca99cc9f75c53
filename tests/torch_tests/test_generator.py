"""torch.generator on real torch (1.9.1 and 2.13): a Generator reaches spawn children (Pool and
Process arguments) with its state; the reducer is ForkingPickler's only.

torch 2.4+ pickles a Generator itself (``Generator.__reduce__``, sharing its state tensor
through a file descriptor that is gone before a spawn child reads it: pytorch#146828); torch
< 2.4 cannot pickle one at all. With the patch both send it through mpcompat's reducer.
"""
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

import mpcompat
import torch_workers
from mpcompat.patches import torch_generator

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


def test_generator_reaches_a_spawn_pool_child_with_its_state(spawn_pool):
    generator = torch.Generator().manual_seed(4321)
    torch.rand(11, generator=generator)
    draws, seed = spawn_pool.apply(torch_workers.draw, (generator, 5))
    assert draws == torch.rand(5, generator=generator).tolist()
    assert seed == 4321


def test_generator_as_a_process_argument_reaches_the_child():
    """pytorch#146828: without the patch this child dies in rebuild_storage_fd (torch 2.4+);
    on older torch the parent cannot pickle the Generator at all."""
    generator = torch.Generator().manual_seed(99)
    torch.rand(3, generator=generator)
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    proc = ctx.Process(target=torch_workers.put_draws, args=(generator, 4, queue))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    assert queue.get() == (torch.rand(4, generator=generator).tolist(), 99)


def test_generator_reducer_is_for_forking_pickler_only(restore_mpcompat):
    generator = torch.Generator().manual_seed(5)
    assert ForkingPickler._extra_reducers[torch.Generator] is torch_generator.reduce_generator
    assert b"rebuild_torch_generator" in bytes(ForkingPickler.dumps(generator))
    if TORCH_2:  # torch.save and pickle: torch's own Generator.__reduce__
        assert b"mpcompat" not in pickle.dumps(generator)
    else:  # torch < 2.4 has no Generator.__reduce__: plain pickle still refuses it
        with pytest.raises(TypeError, match="cannot pickle 'torch._C.Generator' object"):
            pickle.dumps(generator)
    copy = pickle.loads(ForkingPickler.dumps(generator))
    assert copy.initial_seed() == 5 and torch.equal(copy.get_state(), generator.get_state())
    mpcompat.deactivate()
    assert torch.Generator not in ForkingPickler._extra_reducers
    if not TORCH_2:  # the "before" on torch < 2.4: ForkingPickler refuses it too
        with pytest.raises(TypeError, match="cannot pickle 'torch._C.Generator' object"):
            ForkingPickler.dumps(generator)
    mpcompat.activate()
    assert ForkingPickler._extra_reducers[torch.Generator] is torch_generator.reduce_generator


def test_applying_again_changes_nothing():
    torch_generator.apply(torch)
    torch_generator.apply(torch)
    assert ForkingPickler._extra_reducers[torch.Generator] is torch_generator.reduce_generator
