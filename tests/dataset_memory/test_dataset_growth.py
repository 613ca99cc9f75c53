"""A DataLoader dataset that grows in every worker is named once, in the main process: fork
workers reading a list of 600,000 dicts (as mmdet3d 0.x's ``data_infos``) copy its pages as they
read them (reference counts), and the note names ``dataset.data_infos``, the growth measured, the
projection and the fix; a numpy array of about the same size grows nothing and is never named.
Spawn: the pickled copies sent to each worker, projected over LOCAL_WORLD_SIZE ranks, against a
memory cgroup's limit. A worker whose private memory grew, then OOM-killed, has the growth in
its error. Each scenario runs in a child bounded by a timeout."""
import os
import re

import pytest

from exit_evidence_helpers import make_cgroup, remove_cgroup
from pool_workers_helpers import flat, run_script

pytest.importorskip("torch")
pytest.importorskip("numpy")

SCENARIO = '''\
import sys
from dataset_memory_helpers import main

if __name__ == "__main__":
    main(sys.argv)
'''
NOTE = "MpcompatWarning: mpcompat: the private memory of this DataLoader's 2 worker processes " \
    "grows as they read the dataset"
GROWTH = re.compile(r"it grew to ([0-9.]+) MiB in all in the \d+ s since they were forked, and "
                    r"still grows \(Private_Dirty, /proc/PID/smaps_rollup; pid \d+: [0-9.]+ MiB; "
                    r"pid \d+: [0-9.]+ MiB\)\.")
BLAMED = re.compile(r"The largest container of Python objects in the dataset: dataset\.data_infos: "
                    r"list of 600,000 dicts, about ([0-9.]+) MiB\.")
PROJECTED = re.compile(r"Projected: 2 workers x 1 rank\(s\) on this machine \(no LOCAL_WORLD_SIZE "
                       r"or WORLD_SIZE set\) x [0-9.]+ MiB \(the dataset's size\) = ")
FIX = "Fix: dataset.data_infos = mpcompat.shared_list(dataset.data_infos), before the " \
    "DataLoader starts its workers"


def run(tmp_path, *args, **env):
    data, proc = run_script(tmp_path, SCENARIO, *args, timeout=120, **env)
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stderr[-3000:]
    return proc


@pytest.fixture
def cgroup():
    directory = make_cgroup("mpcompat-test-dataset-%d" % os.getpid(), 2 << 30)
    if directory is None:
        pytest.skip("no memory cgroup can be made here (no cgroup file system, or not root)")
    yield directory
    remove_cgroup(directory)


def test_list_of_dicts_growing_in_fork_workers_is_named_once(tmp_path):
    stderr = flat(run(tmp_path, "infos", "fork").stderr)
    assert stderr.count("MpcompatWarning") == 1 and NOTE in stderr, stderr[-3000:]
    assert float(GROWTH.search(stderr).group(1)) >= 128, stderr  # 64 MiB per worker at least
    assert 200 < float(BLAMED.search(stderr).group(1)) < 800, stderr
    assert PROJECTED.search(stderr) and FIX in stderr, stderr
    # attributed to the user's loop, not to torch or mpcompat
    assert "dataset_memory_helpers.py:" in stderr.split("MpcompatWarning")[0], stderr


def test_datasets_that_do_not_grow_or_weigh_are_never_named(tmp_path):
    # a numpy array of 384 MB read by fork workers; 2 x 47.7 MiB of spawn copies, one rank,
    # against the machine's memory
    proc = run(tmp_path, "quiet", "-", LOCAL_WORLD_SIZE=None, WORLD_SIZE=None)
    assert "mpcompat" not in proc.stderr, proc.stderr
    # the fork workers were read as often as the rule needs (their baseline counts one)
    counts = re.search(r"READINGS:(\d+),(\d+)\n", proc.stdout)
    assert counts and min(map(int, counts.groups())) >= 3, proc.stdout


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_copies_weighing_on_the_limit_are_named(tmp_path, cgroup, method):
    # 2 workers x 8 ranks x 47.7 MiB pickled = 763 MiB, 37% of the cgroup's 2 GiB
    stderr = flat(run(tmp_path, "blobs", method, os.path.join(cgroup, "cgroup.procs"),
                      LOCAL_WORLD_SIZE="8").stderr)
    assert stderr.count("MpcompatWarning") == 1, stderr[-3000:]
    assert ("every one of this DataLoader's 2 worker processes (spawn/forkserver) got its own "
            "copy of the dataset, pickled in its Process object: 47.7 MiB each, 95.4 MiB in "
            "all.") in stderr, stderr
    assert "dataset.blobs: list of 100 bytes objects, about 47.7 MiB." in stderr, stderr
    assert re.search(r"Projected: 2 workers x 8 rank\(s\) on this machine \(LOCAL_WORLD_SIZE/"
                     r"WORLD_SIZE\) x 47\.7 MiB \(the pickled copy\) = 763\.0 MiB = 37% of the "
                     r"limit of memory cgroup \S+ \(memory\.(max|limit_in_bytes)\), 2\.0 GiB\.",
                     stderr), stderr
    assert "Fix: dataset.blobs = mpcompat.shared_list(dataset.blobs)" in stderr, stderr


def test_oom_killed_worker_whose_memory_grew_says_so(tmp_path):
    directory = make_cgroup("mpcompat-test-dataset-oom-%d" % os.getpid())
    if directory is None:
        pytest.skip("no memory cgroup can be made here (no cgroup file system, or not root)")
    try:
        proc = run(tmp_path, "oom", "fork", os.path.join(directory, "cgroup.procs"))
    finally:
        remove_cgroup(directory)
    error = [line for line in proc.stdout.splitlines() if line.startswith("ERROR:")]
    assert error, proc.stdout + proc.stderr[-3000:]
    text = flat(error[0].replace("\\n", "\n"))
    assert "killed by the kernel's OOM killer" in text or "out of memory" in text.lower(), text
    grew = re.search(r"Its private memory \(Private_Dirty\) grew to ([0-9.]+) MiB in the \d+ s "
                     r"since it was forked \(mpcompat's readings, the last [0-9.]+ s before "
                     r"it was found dead\): copy-on-read of dataset\.data_infos: list of "
                     r"600,000 dicts, about [0-9.]+ MiB \(a fork worker copies each page of it "
                     r"that it reads\)\.", text)
    assert grew and float(grew.group(1)) > 64, text
    assert FIX in text, text
