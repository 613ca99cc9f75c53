"""The sampler's reading of a process's private memory: ``/proc/PID/smaps_rollup`` where the
kernel has it (4.14+), else the sum over ``/proc/PID/smaps``; both give the same totals (read
here of a child that holds still). And the walk that names the attribute to blame: the largest
container of Python objects reachable from a dataset, bounded in objects and time."""
import os
import subprocess
import sys
import time

import pytest

from mpcompat.diagnose import dataset_growth
from mpcompat.workers import dataset_memory

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"),
                                reason="no /proc/PID/smaps on this system (Linux only)")
HOLD = "import sys; data = bytearray(32 << 20); sys.stdout.write('ready\\n'); " \
    "sys.stdout.flush(); sys.stdin.read()"


def test_smaps_and_smaps_rollup_give_the_same_totals():
    if not os.path.exists("/proc/self/smaps_rollup"):
        pytest.skip("this kernel has no smaps_rollup (< 4.14): only the fallback is used")
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        time.sleep(0.2)
        rollup = dataset_memory.private_memory(child.pid, ("smaps_rollup",))
        summed = dataset_memory.private_memory(child.pid, ("smaps",))
        default = dataset_memory.private_memory(child.pid)
    finally:
        child.communicate(b"")
    assert rollup is not None and summed is not None and default is not None
    # Private_Dirty holds still; Pss moves as other processes map or unmap the pages the child
    # shares with them (a CI run: 2 kB between two reads), so it is compared within 1 MB.
    assert default[0] == rollup[0], (default, rollup)
    for whole, parts, first in zip(rollup, summed, default):  # Private_Dirty, Pss
        assert abs(whole - parts) < 1 << 20 and abs(whole - first) < 1 << 20, (rollup, summed,
                                                                                default)
    assert rollup[0] > 32 << 20, rollup
    assert dataset_memory.private_memory(child.pid) is None  # gone

class Holder(object):
    def __init__(self):
        self.small = list(range(50))
        self.meta = {"version": 1, "classes": ["car"] * 10}
        self.inner = type("Inner", (), {})()
        self.inner.infos = {"infos": [{"token": "t%d" % i, "boxes": [float(i)] * 8}
                                      for i in range(20000)]}
        self.names = ["n%d" % i for i in range(5000)]


def test_the_walk_names_the_largest_container_with_its_path_and_size():
    path, text, nbytes, container = dataset_growth.largest_container(Holder())
    assert path == "dataset.inner.infos['infos']" and text == "list of 20,000 dicts", path
    exact = sum(sys.getsizeof(d) + sys.getsizeof(d["token"]) + sys.getsizeof(d["boxes"]) +
                sys.getsizeof(d["boxes"][0]) for d in container)  # one float, 8 times
    assert 0.8 * exact < nbytes < 1.3 * exact, (nbytes, exact)


def test_the_walk_is_bounded():
    holder = Holder()
    started = time.monotonic()
    found = dataset_growth.largest_container(holder, visits=3)
    assert time.monotonic() - started < 1.0
    assert found is None or found[0] != "dataset.inner.infos['infos']"
