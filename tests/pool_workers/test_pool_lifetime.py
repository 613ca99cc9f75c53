"""A Pool that is done leaves nothing of mpcompat's behind: its worker Process objects, queues,
dispatcher and channels are freed with it (CPython's regrtest reports kept Process objects as
"dangling processes")."""
import pytest

from testenv import run_python

SCRIPT = """
import gc, sys, time, multiprocessing, multiprocessing.process
import mpcompat
for _ in range(3):
    with multiprocessing.get_context(sys.argv[1]).Pool(2, maxtasksperchild=1) as pool:
        pool.map(abs, range(4))
    pool.join()
pool = multiprocessing.get_context(sys.argv[1]).Pool(2)  # terminated with tasks pending
pending = pool.map_async(time.sleep, [5] * 4)
pool.terminate()
pool.join()
del pool, pending
gc.collect()
patch = sys.modules["mpcompat.patches.mp_pool_workers"]
print("LEFT", len(multiprocessing.process._dangling), len(patch._dispatchers))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_finished_pool_is_freed(method):
    result = run_python(SCRIPT, method, timeout=120)
    assert "LEFT 0 0" in result.stdout, result.stdout + result.stderr
