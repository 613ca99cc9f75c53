"""mpcompat.per_process with real handles (lmdb, h5py, an open file) in real torch DataLoader
workers, fork and spawn (.venv only: torch, lmdb, h5py).

Each scenario runs as a script in a fresh interpreter bounded by a timeout; the workers report
their pid, what they read and what they hold, and the tests check those reports.
"""
import json
import subprocess
import sys
import textwrap

import pytest

from testenv import child_env

N = 6

PRELUDE = """
import json, os, pickle, sys
import lmdb, h5py
import torch
from torch.utils.data import DataLoader
import mpcompat
from per_process_helpers import *

LMDB, LMDB_RW, H5, BLOB, N = {lmdb!r}, {lmdb_rw!r}, {h5!r}, {blob!r}, {n}


def load(dataset, method):
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate_items,
                        multiprocessing_context=method)
    return [item for batch in loader for item in batch]


def error_of(call):
    try:
        call()
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    return None
"""

FORK_SCENARIO = """
out = {}
ds = HandlesDataset(LMDB, H5, BLOB, N)
out["parent"] = ds[0]  # the parent opens all three before the workers are forked
parent_objects = [h.__wrapped__ for h in (ds.env, ds.h5, ds.blob)]
out["items"] = load(ds, "fork")
out["parent_after"] = ds[N - 1]
out["parent_kept_its_own"] = all(
    h.__wrapped__ is o for h, o in zip((ds.env, ds.h5, ds.blob), parent_objects))

# lock=True, writable: the workers close their inherited copies; the parent reads and writes on.
rw = HandlesDataset(LMDB_RW, H5, BLOB, N, lmdb_kwargs={})
rw[0]
out["rw_items"] = load(rw, "fork")
with rw.env.begin(write=True) as txn:
    txn.put(b"new", b"after-workers")
with rw.env.begin() as txn:
    out["rw_parent_after"] = [txn.get(b"2").decode(), txn.get(b"new").decode()]

# Before: a worker that keeps the inherited environment cannot open its own. (One process
# opens an environment once: the parent closes the first dataset's before.)
out["closed"] = mpcompat.per_process.close(ds.env)
keep = HandlesDataset(LMDB, H5, BLOB, N, on_fork="keep")
keep[0]
out["keep_error"] = error_of(lambda: load(keep, "fork"))
print(json.dumps(out))
"""

SPAWN_SCENARIO = """
from multiprocessing.reduction import ForkingPickler

if __name__ == "__main__":
    out = {"parent_pid": os.getpid()}
    ds = HandlesDataset(LMDB, H5, BLOB, N)
    out["parent"] = ds[0]  # used in the parent before it is sent
    data = bytes(ForkingPickler.dumps(ds))
    out["pickle_size"] = len(data)
    out["pickle_has_handle_data"] = [m in data for m in (b"lmdbvalue", b"rec000", b"HDF")]
    out["pickle_names_lmdb"] = b"\\x8c\\x04lmdb" in data and b"Environment" in data
    out["items"] = load(ds, "spawn")
    out["parent_after"] = ds[1]

    # Before: the environment itself cannot reach a spawn worker.
    mpcompat.per_process.close(ds.env)  # one process opens an environment once

    class RawEnv(object):
        def __init__(self):
            self.env = lmdb.open(LMDB, readonly=True, lock=False)
    out["raw_error"] = error_of(lambda: pickle.dumps(RawEnv()))
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The lmdb environments, HDF5 file and binary file the scenarios read (N records each)."""
    from per_process_helpers import make_blob, make_h5, make_lmdb
    root = tmp_path_factory.mktemp("handles")
    paths = dict(lmdb=str(root / "env"), lmdb_rw=str(root / "env_rw"), h5=str(root / "x.h5"),
                 blob=str(root / "blob.bin"), n=N)
    make_lmdb(paths["lmdb"], N)
    make_lmdb(paths["lmdb_rw"], N)
    make_h5(paths["h5"], N)
    make_blob(paths["blob"], N)
    paths["root"] = root
    return paths


def run_scenario(data, scenario, name):
    script = data["root"] / ("%s.py" % name)
    script.write_text(PRELUDE.format(**data) + textwrap.dedent(scenario))
    proc = subprocess.run([sys.executable, str(script)], env=child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=240, cwd=str(data["root"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fork_report(data):
    return run_scenario(data, FORK_SCENARIO, "fork_scenario")


@pytest.fixture(scope="module")
def spawn_report(data):
    return run_scenario(data, SPAWN_SCENARIO, "spawn_scenario")


def expected_values(item, i):
    assert item["lmdb"] == "lmdbvalue%d" % i
    assert item["h5"] == 10 * i
    assert item["blob"] == "rec%05d" % i


def check_items(items, parent_pid):
    assert len(items) == N
    for i, item in enumerate(items):
        expected_values(item, i)
        assert item["created"] == [True, True, True]  # each handle made in the worker itself
    worker_pids = set(item["pid"] for item in items)
    assert len(worker_pids) == 2 and parent_pid not in worker_pids
    return worker_pids


def test_fork_workers_open_their_own_after_the_parent_used_them(fork_report):
    parent = fork_report["parent"]
    expected_values(parent, 0)
    check_items(fork_report["items"], parent["pid"])
    for item in fork_report["items"]:
        # The inherited file stays open in the worker (on_fork "keep"): its own is another fd.
        assert item["blob_fd"] != parent["blob_fd"]
        assert item["h5_id"] != parent["h5_id"]


def test_fork_parent_keeps_reading_its_own_handles(fork_report):
    expected_values(fork_report["parent_after"], N - 1)
    assert fork_report["parent_after"]["pid"] == fork_report["parent"]["pid"]
    assert fork_report["parent_kept_its_own"] is True


def test_fork_lmdb_with_locking_parent_reads_and_writes_after_workers(fork_report):
    check_items(fork_report["rw_items"], fork_report["parent"]["pid"])
    assert fork_report["rw_parent_after"] == ["lmdbvalue2", "after-workers"]


def test_fork_lmdb_already_open_trap_without_the_close_rule(fork_report):
    # What a hand-written "reopen in the child" hits; the default rule closes first.
    assert fork_report["closed"] is True
    assert "is already open in this process" in fork_report["keep_error"]


def test_spawn_workers_receive_the_recipe_only(spawn_report):
    assert spawn_report["pickle_has_handle_data"] == [False, False, False]
    assert spawn_report["pickle_size"] < 2000
    # lmdb.open is lmdb's Environment, which calls itself builtins.Environment: it travels
    # as the module it was found in.
    assert spawn_report["pickle_names_lmdb"] is True


def test_spawn_workers_open_their_own(spawn_report):
    expected_values(spawn_report["parent"], 0)
    check_items(spawn_report["items"], spawn_report["parent_pid"])
    expected_values(spawn_report["parent_after"], 1)


def test_spawn_raw_lmdb_environment_does_not_pickle(spawn_report):
    assert spawn_report["raw_error"].startswith("TypeError")
    assert "Environment" in spawn_report["raw_error"]
