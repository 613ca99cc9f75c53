"""A DataLoader worker killed by a signal (the OOM killer's SIGKILL, a segfault in an
extension) still gets torch's own error; mpcompat adds the signal by name and its likely cause,
from the iterator's own worker processes. Runs in a child bounded by a timeout."""
import pytest

from pool_workers_helpers import flat, run_script

SCENARIO = '''\
import sys, traceback
import torch
import mpcompat
from pool_workers_helpers import report
from torch_workers import DyingDataset

if __name__ == "__main__":
    loader = torch.utils.data.DataLoader(DyingDataset(sys.argv[2]), batch_size=None,
                                         num_workers=2, multiprocessing_context=sys.argv[1])
    try:
        list(loader)
        report({"text": "no error"})
    except RuntimeError as exc:
        report({"text": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))})
'''


@pytest.mark.parametrize("method,signal,hint", [
    ("fork", "SIGKILL", "journalctl -k"), ("spawn", "SIGSEGV", "PYTHONFAULTHANDLER=1")])
def test_a_killed_worker_keeps_torchs_error_and_gains_the_cause(tmp_path, method, signal, hint):
    data, proc = run_script(tmp_path, SCENARIO, method, signal, timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    text = flat(data["text"])
    assert "DataLoader worker (pid" in text  # torch's own error, as without mpcompat
    number = {"SIGKILL": 9, "SIGSEGV": 11}[signal]
    assert "mpcompat: DataLoader worker process " in text
    assert ": killed by signal %d (%s). " % (number, signal) in text and hint in text, text
