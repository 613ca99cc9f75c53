"""Issue 26 with torch (torch 1.9.1 on Python 3.8, 2.13 on 3.11 and 3.14): a DataLoader worker
killed by SIGKILL leaves nothing in the temporary directory once the program has ended (item 4),
and the error the user reads names no file of mpcompat (item 2; from Python 3.11: before, a
re-raise restores the traceback it caught, with the one wrapper frame that adds the cause)."""
import os

import pytest

from one_report_helpers import own_lines, run_user_script

KILLED = '''\
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Killed(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            time.sleep(0.3)  # the main process waits in its queue's get by then
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.zeros(4)

if __name__ == "__main__":
    # torch resolves record_function's ops lazily at the first batch; a SIGCHLD landing there
    # turns torch's error into an AttributeError (torch's race, with or without mpcompat).
    with torch.autograd.profiler.record_function("warm-up"):
        pass
    loader = DataLoader(Killed(), batch_size=2, num_workers=2,
                        multiprocessing_context=sys.argv[1])
    for batch in loader:
        pass
'''


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_killed_dataloader_worker_leaves_nothing_on_disk(method, tmp_path):
    private = tmp_path / "tmp"
    private.mkdir()
    script = tmp_path / "run"
    script.mkdir()
    # torch 2.13 makes its inductor cache directory in TMPDIR when it logs an exception, as it
    # does if the worker's SIGCHLD lands inside its first `record_function`'s lazy import. That
    # directory is torch's, with or without mpcompat: it goes elsewhere here.
    code, lines = run_user_script(script, KILLED, method, timeout=180, TMPDIR=str(private),
                                  TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch-cache"))
    text = "\n".join(lines)
    # torch's own error either way: "exited unexpectedly" when the worker's SIGCHLD lands in
    # its queue's get, "is killed by signal" from torch's SIGCHLD handler anywhere else.
    assert code == 1 and ("exited unexpectedly" in text or "is killed by signal" in text), text
    assert "killed by signal 9 (SIGKILL)" in text, text
    assert os.listdir(str(private)) == [], text
    assert own_lines(lines) == [], text  # before 3.11: left out by sys.excepthook
