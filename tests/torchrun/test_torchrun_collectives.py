"""A stuck collective names the rank that stalled (the ``torch.collective_hang_dump`` patch): two
torchrun agents on this machine, as two nodes of one job (c10d rendezvous), one rank each; rank
1 sleeps before its second all_reduce while rank 0 waits in it, with MPCOMPAT_HANG_DUMP=3."""
import os
import socket
import time

import pytest

from torchrun_helpers import finish, free_port, start_torchrun


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    endpoint = "--rdzv_endpoint=127.0.0.1:%d" % free_port()
    nodes = []
    for node in (0, 1):
        tmp_path = tmp_path_factory.mktemp("node%d" % node)
        nodes.append(start_torchrun(tmp_path, "stuck.py", "--nnodes=2", "--nproc_per_node=1",
                                    "--rdzv_backend=c10d", endpoint, "--rdzv_id=stuck",
                                    script_args=[8], MPCOMPAT_HANG_DUMP="3"))
        time.sleep(0.5)  # the first agent hosts the rendezvous store
    return [finish(node, 180) for node in nodes]


def _both(two_nodes):
    return "".join(proc.stderr for proc in two_nodes)


def test_the_dump_names_the_stalled_rank_on_the_other_node(two_nodes):
    assert [proc.returncode for proc in two_nodes] == [0, 0], _both(two_nodes)[-3000:]
    assert "".join(p.stdout for p in two_nodes).count(": 4.0") == 2  # both ran to the end
    text = _both(two_nodes)
    waiting = [line for line in text.splitlines() if "has waited" in line]
    # One dump, by the rank that waits (whichever node it runs on), naming its rank.
    assert len(waiting) == 1, text
    assert waiting[0].startswith("mpcompat: rank ") and " in all_reduce #2; " in waiting[0]
    stalled = "1" if waiting[0].startswith("mpcompat: rank 0 ") else "0"
    host = socket.gethostname()
    assert ("rank %s (local rank 0 on %s, pid " % (stalled, host)) in text
    assert "is not in all_reduce #2: it is at stuck.py:15 in run" in text
    assert 'line 15, in run\n      time.sleep(pause)' in text
    assert "mpcompat%s" % os.sep not in text.split("has waited", 1)[1].split("end of the")[0]


def test_start_up_and_quick_collectives_never_dump(two_nodes):
    assert "all_reduce #1" not in _both(two_nodes)
