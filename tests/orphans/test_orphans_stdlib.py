"""No orphans (issue 35), standard library: Pool, ProcessPoolExecutor and ``Process`` children,
under fork, spawn and forkserver, busy in a task, blocked in a pipe write or idle, end within
2 s of their parent's death by SIGKILL, SIGTERM or the OOM killer, each with one line saying
so; the forkserver and the resource tracker end with them. A child started by a thread that
ends at once, and one started with ``MPCOMPAT_OUTLIVE_PARENT=1``, still live 10 s on. Without
mpcompat a row leaves its child alive (the scenario can fail). Every scenario runs at once; the
before/after table is ``benchmarks/bench_orphans.py``."""
import sys
import threading

import pytest

from orphans_helpers import MATRIX, Row, check, run_rows

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the parent's death is watched on Linux")


def test_no_child_outlives_its_parent(tmp_path):
    rows = [row for row in MATRIX if not row.torch]
    stdlib = [Row("process", "fork", "pipe", "SIGKILL", workers=1)]
    results, without = {}, {}
    base, bare = str(tmp_path / "on"), str(tmp_path / "off")
    other = threading.Thread(target=lambda: without.update(run_rows(stdlib, bare, False)))
    other.start()
    results.update(run_rows(rows, base, True))
    other.join()
    failures = check([row for row in rows if repr(row) in results], results)
    assert not failures, "\n".join(failures)
    assert without[repr(stdlib[0])]["survivors"], "without mpcompat, the child outlives it"
