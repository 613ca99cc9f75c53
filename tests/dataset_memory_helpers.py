"""Datasets for tests/dataset_memory (importable by spawn DataLoader workers), and the scenario
that iterates one: a list of dicts (as mmdet3d 0.x's ``data_infos``), which fork workers copy as
they read it; a numpy array of about the same size, which they do not; a list of bytes blobs
sent whole to each spawn worker.

Importing this module imports torch and numpy (the scenarios need both), never mpcompat.
"""
import os
import sys
import time

import numpy as np
import torch.utils.data as data

from exit_evidence_helpers import exhaust_memory, join_cgroup


class Infos(data.Dataset):
    """``n`` small dicts in ``self.data_infos``; ``__getitem__`` reads one. Item ``oom_at``
    moves its worker into the cgroup of ``procs`` and allocates until the OOM killer kills it."""

    def __init__(self, n, oom_at=None, procs=None):
        self.data_infos = [{"token": "s%d" % i, "idx": i, "score": float(i), "frame": i % 40,
                            "lidar_path": "samples/LIDAR_TOP/%08d.bin" % i,
                            "timestamp": 1.5e15 + i, "gt_names": ["car", "truck"],
                            "sweeps": [float(i)] * 4} for i in range(n)]
        self.oom_at, self.procs = oom_at, procs

    def __len__(self):
        return len(self.data_infos)

    def __getitem__(self, index):
        if index == self.oom_at:
            exhaust_memory(self.procs)
        return self.data_infos[index]["idx"]


class Table(data.Dataset):
    """A float64 array of ``n`` rows of 80 (384 MB for 600,000), read a row at a time."""

    def __init__(self, n):
        self.table = np.arange(n * 80, dtype=np.float64).reshape(n, 80)

    def __len__(self):
        return len(self.table)

    def __getitem__(self, index):
        return float(self.table[index, 3])


class Blobs(data.Dataset):
    """``n`` bytes objects of ``each`` bytes."""

    def __init__(self, n, each):
        self.blobs = [bytes([i % 256]) * each for i in range(n)]

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, index):
        return len(self.blobs[index])


def iterate(dataset, method, workers=2, batch_size=1000, step=0.012):
    """One pass over ``dataset`` by a DataLoader, ``step`` seconds of "training" per batch in
    this process (the workers read ahead by two batches each, so the pass lasts about
    batches x step). Returns the number of batches."""
    loader = data.DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                             multiprocessing_context=method)
    count = 0
    for _ in loader:
        time.sleep(step)
        count += 1
    return count


def main(argv):
    """``scenario KIND METHOD [PROCS]``: "infos" or "blobs"; "quiet": the table under fork, then
    the blobs under spawn; "oom" iterates the infos
    with one worker until it is OOM-killed (item 450,000) in the cgroup of PROCS; a PROCS for
    the others: this process joins that cgroup first."""
    import traceback
    import mpcompat  # noqa: F401  (a spawned interpreter without the .pth: activate here)
    from mpcompat.workers import dataset_memory
    # Readings 4 times as often as by default, bounded to 5% of the loop's time, not 1% (on a
    # loaded 2-core CI machine a reading here can take 100 ms): a pass lasts seconds, not 20 s.
    # The rule is unchanged.
    dataset_memory.INTERVAL, dataset_memory.COST_SHARE = 0.5, 0.05
    kind, method = argv[1], argv[2]
    procs = argv[3] if len(argv) > 3 else None
    if procs and kind != "oom":
        join_cgroup(procs)
    if kind == "infos":
        iterate(Infos(600000), method, step=0.01)
    elif kind == "quiet":  # neither may be named (METHOD unused)
        iterate(Table(600000), "fork", step=0.01)
        sys.stdout.write("READINGS:%s\n" % ",".join(
            str(w.count) for w in dataset_memory.readings.values()))
        iterate(Blobs(100, 500000), "spawn", batch_size=10, step=0)
    elif kind == "blobs":
        iterate(Blobs(100, 500000), method, batch_size=10, step=0)
    else:
        try:
            iterate(Infos(600000, oom_at=450000, procs=procs), method, workers=1, step=0.01)
        except RuntimeError as exc:
            sys.stdout.write("ERROR:" + "".join(traceback.format_exception(
                type(exc), exc, exc.__traceback__)).replace("\n", "\\n") + "\n")
    sys.stdout.write("DONE\n")


if __name__ == "__main__":
    main(sys.argv)
