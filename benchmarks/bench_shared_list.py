"""``mpcompat.shared_list`` (issue 37): the cost of an item access, and the memory of
DataLoader workers reading a list of 500,000 small dicts, plain against shared.

Item access: ``shared[i]`` (one ``pickle.loads`` of a 1 kB dict from the shared buffer)
against ``plain[i]``, interleaved rounds over the same random indices; target: at most 10 us.

Memory: 4 DataLoader workers (torch) read every item twice (``persistent_workers``), under
fork, spawn and forkserver, first from the plain list, then from the shared list. Each batch
(5,000 items) returns its worker's Private_Dirty and Pss (``/proc/PID/smaps_rollup``); a
worker's figure is its largest reading. Workers pay for more than the data (the interpreter,
torch, and under fork the pages that a full garbage collection writes): the baseline is the
same loader doing the same reads over a 1,000-item shared list, and a worker's cost of the
data is its Private_Dirty above the baseline's. Target: at most 5% of the data's size (the
main process's resident memory growth as it builds the list) under every start method.
"""
import gc
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
for path in (os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from _common import Table, interleaved, median, verdict  # noqa: E402
from shared_containers_helpers import memory as smaps  # noqa: E402  (smaps_rollup)

N_ITEMS = 500000
WORKERS = 4
CHUNK = 5000
ACCESS_TARGET_US = 10.0
SHARE_TARGET = 0.05
MB = 1 << 20


def small_dicts(n):
    """``n`` small dicts, as a detection dataset's infos."""
    return [{"id": i, "token": "%032x" % i, "width": 1600, "height": 900,
             "file": "samples/CAM_FRONT/%08d.jpg" % i} for i in range(n)]


def kilobyte_dict(i):
    """A dict that pickles to about 1 kB."""
    return {"token": "%032x" % i, "boxes": [[float(i + k)] * 7 for k in range(12)],
            "names": ["car", "pedestrian", "barrier"] * 4, "timestamp": 1533151603547590 + i}


def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Reader(object):
    """Item ``k`` reads ``CHUNK`` items of ``infos`` (cyclically, ``length`` in all) and
    returns ``(pid, Private_Dirty, Pss)`` after."""

    def __init__(self, infos, length):
        self.infos, self.length = infos, length

    def __len__(self):
        return -(-self.length // CHUNK)

    def __getitem__(self, k):
        infos, n = self.infos, len(self.infos)
        total = 0
        for i in range(k * CHUNK, min(self.length, (k + 1) * CHUNK)):
            total += infos[i % n]["id"]
        return (os.getpid(),) + smaps()


def keep(sample):
    return sample


def workers(infos, method, length):
    """Per worker, its largest ``(Private_Dirty, Pss)`` over two passes."""
    import torch.utils.data as data
    loader = data.DataLoader(Reader(infos, length), batch_size=None, num_workers=WORKERS,
                             collate_fn=keep, multiprocessing_context=method,
                             persistent_workers=True)
    worst = {}
    for _ in range(2):
        for pid, dirty, pss in loader:
            old = worst.get(pid, (0, 0))
            worst[pid] = (max(old[0], dirty), max(old[1], pss))
    del loader
    return worst


def access(quick):
    import pickle
    import mpcompat
    n = 2000
    plain = [kilobyte_dict(i) for i in range(n)]
    variants = {"list[i]": plain}
    for backend in ("torch", "shared_memory"):
        variants["shared_list[i] (%s)" % backend] = mpcompat.shared_list(plain, backend=backend)
    indices = [random.randrange(n) for _ in range(20000 if quick else 100000)]

    def read(container):
        def run():
            for i in indices:
                container[i]
        return run
    times = interleaved({name: read(c) for name, c in variants.items()}, 5 if quick else 15)
    table = Table("Item access: shared_list[i] against list[i] (a %d-byte pickled dict, random "
                  "indices, median of interleaved rounds)" % len(pickle.dumps(plain[0], 5)),
                  ["access", "us per access", "target", ""])
    for name, values in times.items():
        us = median(values) / len(indices) * 1e6
        if name == "list[i]":
            table.add(name, "%.3f" % us, "", "")
        else:
            table.add(name, "%.2f" % us, "<= %.0f us" % ACCESS_TARGET_US,
                      verdict(us <= ACCESS_TARGET_US))
    return table


def memory(quick):
    import torch  # noqa: F401  (the torch backend, and the DataLoader)
    import mpcompat
    n = N_ITEMS // 5 if quick else N_ITEMS
    gc.collect()
    before = resident()
    plain = small_dicts(n)
    size = resident() - before
    start = time.perf_counter()
    shared = mpcompat.shared_list(plain)
    built = time.perf_counter() - start
    small = mpcompat.shared_list(small_dicts(1000))
    table = Table("DataLoader workers reading %s small dicts twice (%d workers): private "
                  "memory per worker" % (format(n, ","), WORKERS),
                  ["start method", "list", "Private_Dirty (MB, each worker)", "Pss (MB)",
                   "above baseline (worst)", "share of the data", "target", ""],
                  notes=["data: %.0f MB of resident memory in the main process as the list "
                         "is built; the shared list: %.0f MB pickled (%s), built in %.1f s"
                         % (size / MB, shared.nbytes / MB, shared.backend, built),
                         "baseline: the same loader reading a 1,000-item shared list as "
                         "many times"])
    for method in ("fork", "spawn", "forkserver"):
        base = workers(small, method, n)
        floor = max(dirty for dirty, _ in base.values())
        for name, infos in (("baseline", small), ("plain", plain), ("shared", shared)):
            worst = base if name == "baseline" else workers(infos, method, n)
            dirty = sorted(d for d, _ in worst.values())
            pss = sorted(p for _, p in worst.values())
            above = max(dirty) - floor
            row = [method, name, " ".join("%.0f" % (d / MB) for d in dirty),
                   " ".join("%.0f" % (p / MB) for p in pss)]
            if name == "baseline":
                table.add(*(row + ["", "", "", ""]))
                continue
            share = max(above, 0) / float(size)
            ok = share <= SHARE_TARGET
            table.add(*(row + ["%.1f MB" % (above / MB), "%.1f%%" % (share * 100),
                               "<= %.0f%%" % (SHARE_TARGET * 100) if name == "shared" else "",
                               verdict(ok) if name == "shared" else ""]))
    return table


def run(quick=False):
    import warnings
    warnings.filterwarnings("ignore", "This DataLoader will create")  # 4 workers, 2 CPUs
    return [access(quick), memory(quick)]


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
        print()
