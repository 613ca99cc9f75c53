"""Issue 33 with torch: a spawn DataLoader in a script without a main guard. Its workers print
nothing (each said the cause, and that its parent reports it); torch's error names the cause
once, and its exit-code line no longer says the worker's traceback is on its stderr (there is
none: the worker sent its error to the parent)."""
import sys

import pytest

from one_report_helpers import own_lines, run_user_script

pytest.importorskip("torch")
FORKSERVER_DIES_OF_MAIN = sys.version_info[:2] == (3, 14)  # it imports the main module

NO_GUARD = '''\
import sys
import torch
from torch.utils.data import DataLoader, Dataset

class Numbers(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i

loader = DataLoader(Numbers(), batch_size=2, num_workers=2, multiprocessing_context=sys.argv[1])
for batch in loader:
    print(batch)
'''


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_no_main_guard_dataloader_says_its_cause_once(method, tmp_path):
    code, lines = run_user_script(tmp_path, NO_GUARD, method, timeout=240)
    text = "\n".join(lines)
    assert own_lines(lines) == [], text
    if method == "forkserver" and FORKSERVER_DIES_OF_MAIN:
        # the forkserver itself dies of it, before any worker: its one line (the cause), then
        # the parent's error from w.start() with the fix (tests/one_report/test_one_report_pool)
        assert code == 1 and lines[0].startswith("mpcompat: the forkserver process (pid "), text
        assert text.count("Traceback (most recent call last)") == 1, text
        assert text.count("finished its bootstrapping phase") == 1, text
        assert "Line 13 of script.py starts processes at module level" in \
            text.replace("\n", " "), text
        return
    assert code == 1 and "exited unexpectedly" in text, text
    assert not [line for line in lines if line.startswith("mpcompat: this process")], text
    assert "reports it once" not in text, text
    assert "traceback is on the worker's stderr" not in text, text
    assert "Exit code 1: an exception nobody caught ended it (Python's exit code for that)." \
        in lines, text
    assert text.count("script.py, line 13 starts a new process") == 1, text
    assert text.count("finished its bootstrapping phase") == 1, text
