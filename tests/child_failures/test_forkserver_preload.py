"""The forkserver's server loads nothing of mpcompat as it starts (it runs no code of the user's
but what it preloads, issue 34): its first child activates mpcompat itself as it is forked.
From its second child on, the server activates mpcompat, once, and applies the patches of the
multiprocessing modules its children run (a Pool worker's ``multiprocessing.pool``'s among
them): every child it forks later inherits them instead of loading them again (the start-up
cost of ``Pool(200)`` under forkserver, issue 24). Patches turned off, or waiting for an
environment variable, are not loaded."""
import json
import os

import pytest

from pool_workers_helpers import run_script
from testenv import REPO, TESTS

STARTUP = os.path.join(REPO, "mpcompat", "_startup")

# Preloaded by the forkserver: before each fork, what the server has of mpcompat (its own fork
# hook, registered later, runs before mpcompat's).
PROBE = r'''
import os
import sys

SERVER = []
os.register_at_fork(before=lambda: SERVER.append(sorted(m for m in sys.modules
                                                        if "mpcompat" in m)))
'''

SCENARIO = r'''
import json
import os
import sys
import multiprocessing


def started(path):
    """A worker's initializer: the server's modules as it forked this worker, and its own."""
    probe = sys.modules["forkserver_probe"]
    report = {"child": len(probe.SERVER), "server": probe.SERVER[-1],
              "active": sys.modules["mpcompat"].is_active(),
              "patches": sorted(name.rpartition(".")[2] for name in sys.modules
                                if name.startswith("mpcompat.patches.mp_"))}
    with open(path, "a") as f:
        f.write(json.dumps(report) + "\n")


def task(x):
    return x


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["forkserver_probe"])
    path = os.path.abspath("started.jsonl")
    pool = context.Pool(3, started, (path,))
    pool.map(task, range(6))
    pool.close()
    pool.join()  # (not terminate(): every initializer has run)
    with open(path) as f:
        print(json.dumps(sorted((json.loads(line) for line in f), key=lambda r: r["child"])))
'''

# what a multiprocessing worker imports anyway
BASE = ["mp_children"]
LOADED = ["_mpcompat_bootstrap", "mpcompat", "mpcompat.activation", "mpcompat.patches"]


@pytest.mark.parametrize("env, expected", [
    ({}, BASE + ["mp_pool_workers"]),
    ({"MPCOMPAT_DISABLED_PATCHES": "multiprocessing.pool_workers"}, BASE),
    ({"MPCOMPAT_HANG_DUMP": "600"}, sorted(BASE + ["mp_hang_dump", "mp_pool_workers"])),
], ids=["default", "pool_workers-disabled", "MPCOMPAT_HANG_DUMP-set"])
def test_the_forkserver_loads_its_childrens_patches_from_its_second_child(tmp_path, env,
                                                                          expected):
    # Under mpcompat run's start-up hook, which the .pth runs too.
    env = dict({"MPCOMPAT_HANG_DUMP": None}, **env)
    (tmp_path / "forkserver_probe.py").write_text(PROBE)
    _, proc = run_script(tmp_path, SCENARIO, PYTHONPATH=os.pathsep.join([STARTUP, REPO, TESTS]),
                         **env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    first, second, third = json.loads(proc.stdout.splitlines()[-1])
    assert [r["child"] for r in (first, second, third)] == [1, 2, 3]
    # nothing of mpcompat in the server until it forks its second child
    assert first["server"] == second["server"] == ["_mpcompat_bootstrap"], (first, second)
    server = third["server"]
    assert set(LOADED) <= set(server), server
    assert [m.rpartition(".")[2] for m in server if ".patches.mp_" in m] == expected, server
    for report in (first, second, third):
        assert report["active"] and report["patches"] == expected, report
