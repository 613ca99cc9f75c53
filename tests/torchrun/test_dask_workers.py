"""Dask pickles tasks with plain pickle first: with mpcompat active, a task holding dict_keys
becomes a payload that names mpcompat.rebuild_views, which a Dask worker loads where mpcompat
is installed, and cannot load where it is not (README, "Other engines")."""
import json
import os
import subprocess
import sys

import distributed  # noqa: F401 (pinned for Python 3.11 only: .ci/test runs this file there)

from pool_workers_helpers import _kill_group
from testenv import REPO, child_env
from torchrun_helpers import SCRIPTS


def _dask(mode, wait, **env):
    """Run scripts/dask_views.py in ``mode``; return (its report, its stderr)."""
    child = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, "dask_views.py"), mode, REPO, str(wait)],
        env=child_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True, start_new_session=True, cwd=REPO)
    try:
        stdout, stderr = child.communicate(timeout=wait + 90)
    finally:
        _kill_group(child, leftovers_only=child.poll() is not None)
    lines = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):]), stderr


def test_a_local_cluster_runs_a_task_holding_dict_keys():
    report, stderr = _dask("with", 60)
    assert report == {"active": True, "payload_names_mpcompat": True,
                      "result": ["bus", "car"]}, stderr[-3000:]


def test_a_worker_without_mpcompat_cannot_load_such_a_task():
    report, stderr = _dask("absent", 4, PYTHONPATH=None)
    assert report["payload_names_mpcompat"] and "result" not in report
    assert "ModuleNotFoundError: No module named 'mpcompat'" in stderr
