"""No orphans (issue 35), torch: DataLoader workers and ``torch.multiprocessing`` processes under
fork, spawn and forkserver, and torchrun's two ranks whose agent is SIGKILLed, end within 2 s
of their parent's death, each with one line saying so (``orphans_helpers.check``). Every
scenario runs at once; the before/after table is ``benchmarks/bench_orphans.py``."""
import sys

import pytest

from orphans_helpers import MATRIX, check, run_rows

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the parent's death is watched on Linux")


def test_no_torch_child_outlives_its_parent(tmp_path):
    import torch  # noqa: F401
    rows = [row for row in MATRIX if row.torch]
    results = run_rows(rows, str(tmp_path), True)
    failures = check([row for row in rows if repr(row) in results], results)
    assert not failures, "\n".join(failures)
