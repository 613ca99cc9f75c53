"""Patch targets imported from eight threads at once, in fresh interpreters (standard library
targets; tests/torch_tests/test_concurrent_imports_torch.py adds torch and nuscenes-devkit).

Whatever the interleaving, every patch ends up applied exactly once per target, with no
warning and nothing missed (mpcompat's finder never leaves sys.meta_path while it works, and a
callback never sees a module whose code is still running).
"""
import pytest

from concurrent_imports_check import check, run_many

TARGETS = ["multiprocessing.reduction", "multiprocessing.spawn", "multiprocessing.pool",
           "concurrent.futures.process", "multiprocessing.managers", "pickle"]


@pytest.mark.parametrize("seeds", [range(0, 8), range(8, 16)], ids=["seeds0-7", "seeds8-15"])
def test_every_patch_applies_exactly_once_whatever_the_interleaving(seeds):
    # a run takes well under a second: one still running after 20 s hangs
    for seed, out in run_many(seeds, TARGETS, hang_after=20):
        check(seed, out)
