"""A forkserver where mpcompat is active from its start loads, as it forks its first child, the
patches of the multiprocessing modules its children import (a Pool worker's
``multiprocessing.pool``): every child it forks inherits them instead of loading them again
(the start-up cost of ``Pool(200)`` under forkserver, issue 24); the server itself starts no
child of the user's and loads none of them as it starts (issue 34). Patches turned off, or
waiting for an environment variable, are not loaded."""
import json
import os

import pytest

from pool_workers_helpers import run_script
from testenv import REPO, TESTS

STARTUP = os.path.join(REPO, "mpcompat", "_startup")

# Imported by the forkserver (its preload list) once it has started: what it had then, and what
# each child it forks has as it is forked.
PROBE = r'''
import os
import sys

IMPORTED_BY = os.getpid()


def patches():
    return sorted(name.rpartition(".")[2] for name in sys.modules
                  if name.startswith("mpcompat.patches.mp_"))


AT_START, INHERITED = patches(), []
os.register_at_fork(after_in_child=lambda: INHERITED.extend(patches()))
'''

SCENARIO = r'''
import json
import os
import sys
import multiprocessing


def forkserver_patches(_):
    """In a worker: the patch modules its parent, the forkserver, had before it served."""
    probe = sys.modules["forkserver_probe"]
    assert probe.IMPORTED_BY == os.getppid() != os.getpid(), (probe.IMPORTED_BY, os.getppid())
    return {"active": sys.modules["mpcompat"].is_active(), "at_start": probe.AT_START,
            "patches": probe.INHERITED}


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["forkserver_probe"])
    with context.Pool(1) as pool:
        print(json.dumps(pool.apply(forkserver_patches, (0,))))
'''


# imported anyway
BASE = ["mp_bootstrap_notes", "mp_exit_evidence", "mp_failure_records", "mp_pickling_notes"]


@pytest.mark.parametrize("env, expected", [
    ({}, BASE + ["mp_pool_workers"]),
    ({"MPCOMPAT_DISABLED_PATCHES": "multiprocessing.pool_workers"}, BASE),
    ({"MPCOMPAT_HANG_DUMP": "600"}, sorted(BASE + ["mp_hang_dump", "mp_pool_workers"])),
], ids=["default", "pool_workers-disabled", "MPCOMPAT_HANG_DUMP-set"])
def test_the_forkserver_loads_the_patches_its_pool_workers_need(tmp_path, env, expected):
    # Under mpcompat run's start-up hook: mpcompat active in the forkserver from its start.
    env = dict({"MPCOMPAT_HANG_DUMP": None}, **env)
    (tmp_path / "forkserver_probe.py").write_text(PROBE)
    _, proc = run_script(tmp_path, SCENARIO, PYTHONPATH=os.pathsep.join([STARTUP, REPO, TESTS]),
                         **env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["active"] and report["patches"] == expected, report
    assert "mp_pool_workers" not in report["at_start"], report
