"""torch: a DataLoader worker and a torch.multiprocessing.spawn process killed by the kernel's
OOM killer are named so (the evidence, the 200 MB limit of the memory cgroup they moved into,
the peak); one SIGKILLed by itself is "not the OOM killer"; spawn's exit code 7 is named.
Torch's own error stays first. Each scenario runs in a child bounded by a timeout."""
import os
import re

import pytest

from exit_evidence_helpers import kernel_log_readable, make_cgroup, remove_cgroup
from pool_workers_helpers import flat, run_script

pytest.importorskip("torch")

SCENARIO = '''\
import sys
import torch
import torch.multiprocessing
import mpcompat
from exit_evidence_helpers import EndsAtItem1, spawned
from pool_workers_helpers import full_outcome, report


def load(how, procs, method):
    loader = torch.utils.data.DataLoader(EndsAtItem1(how, procs), batch_size=None,
                                         num_workers=1, multiprocessing_context=method)
    return full_outcome(lambda: list(loader))["text"]


def spawn(how, procs):
    return full_outcome(lambda: torch.multiprocessing.spawn(spawned, (how, procs), nprocs=1))[
        "text"]


if __name__ == "__main__":
    procs, method = sys.argv[1], sys.argv[2]
    report({"loader oom": load("oom", procs, method), "loader kill": load("kill", None, method),
            "spawn oom": spawn("oom", procs), "spawn kill": spawn("kill", None),
            "spawn exit7": spawn("sys.exit7", None)})
'''
OOM = ("Out of memory: the kernel's OOM killer killed it. Evidence: the kernel log, /dev/kmsg, "
       "names it")
NOT_OOM = re.compile(r"Not the OOM killer \(the kernel log, /dev/kmsg, names no OOM kill of pid "
                     r"\d+ since it started\): another process sent SIGKILL \(a job scheduler's "
                     r"time or memory limit, `kill -9`\)\.")
PEAK = re.compile(r"Its peak resident memory: ([0-9.]+) MiB \(ru_maxrss, as this process reaped "
                  r"it\)\.")


@pytest.fixture
def cgroup():
    directory = make_cgroup("mpcompat-test-torch-%d" % os.getpid())
    if directory is None:
        pytest.skip("no memory cgroup can be made here (no cgroup file system, or not root)")
    yield directory
    remove_cgroup(directory)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_and_spawn_deaths_are_named_from_evidence(tmp_path, cgroup, method):
    if not kernel_log_readable():
        pytest.skip("the kernel log (/dev/kmsg) is not readable here")
    data, proc = run_script(tmp_path, SCENARIO, os.path.join(cgroup, "cgroup.procs"), method,
                            timeout=300)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    texts = {case: flat(text) for case, text in data.items()}
    limit = "The limit it hit: the limit of memory cgroup "
    for case in ("loader oom", "spawn oom"):
        text = texts[case]
        assert OOM in text and limit in text and ", 200.0 MiB (the kernel log: " in text, text
        assert float(PEAK.search(text).group(1)) > 190, text  # its pages in any cgroup
    for case in ("loader kill", "spawn kill"):
        assert NOT_OOM.search(texts[case]), texts[case]
    # torch's own errors stay
    assert re.search(r"DataLoader worker \(pid[(s)]* \d+\) (is killed by signal|exited "
                     r"unexpectedly)", texts["loader oom"]), texts["loader oom"]
    assert re.search(r"mpcompat: DataLoader worker \(pid \d+\) ended: killed by the kernel's OOM "
                     r"killer: signal 9, SIGKILL\.", texts["loader oom"]), texts["loader oom"]
    assert "process 0 terminated with signal SIGKILL" in texts["spawn oom"], texts["spawn oom"]
    assert "process 0 terminated with exit code 7" in texts["spawn exit7"], texts["spawn exit7"]
    assert ("mpcompat: Exit code 7: not one Python itself exits with (it uses 1 for an uncaught "
            "exception, 120 for a failed flush at exit)") in texts["spawn exit7"]
