"""A DataLoader worker that crashes in native code (a real SIGSEGV in ``__getitem__``): the
error names the user's crashing line, with the worker's Python stack. torch's own handlers in
the worker (which print a line and die, chaining to nothing) still run, after faulthandler;
with ``PYTHONFAULTHANDLER=1`` the program's own dump reaches the worker's stderr, which torch's
handlers alone prevent. Each scenario runs in a fresh child bounded by a timeout."""
import pytest

from crash_helpers import crash_line
from pool_workers_helpers import run_script

SCENARIO = '''\
import sys
import torch
import mpcompat
from crash_helpers import Segfaulting, crash_report
from pool_workers_helpers import report

if __name__ == "__main__":
    pid_file = "%s.pid" % sys.argv[1]
    loader = torch.utils.data.DataLoader(Segfaulting(pid_file), batch_size=None, num_workers=1,
                                         multiprocessing_context=sys.argv[1])
    try:
        list(loader)
        report({"error": "no error"})
    except RuntimeError as exc:
        report(crash_report(exc, pid_file))
'''
TORCH_LINE = "ERROR: Unexpected segmentation fault encountered in worker."


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_dataloader_crash_names_the_users_line(tmp_path, method):
    data, proc = run_script(tmp_path, SCENARIO, method, timeout=180)
    assert data is not None, proc.stderr
    path, line = crash_line()
    shown = data["error"] + "\n" + "\n".join(data["lines"])
    assert "It crashed in segfault() at %s:%d: `ctypes.string_at(0)  # CRASH LINE`." % (
        path, line) in shown, shown
    assert [f for f in shown.splitlines()
            if f.startswith('  File "%s"' % path) and f.endswith(" in __getitem__")], shown
    assert "mpcompat" + "/patches" not in shown.split("It crashed in ")[1], shown
    assert TORCH_LINE in proc.stderr, proc.stderr  # torch's handler ran after faulthandler
    assert data["left"] == [], data


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_programs_own_faulthandler_survives_torchs_handlers(tmp_path, method):
    data, proc = run_script(tmp_path, SCENARIO, method, timeout=180, PYTHONFAULTHANDLER="1")
    assert data is not None, proc.stderr
    path, line = crash_line()
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr
    assert '  File "%s", line %d in segfault' % (path, line) in proc.stderr, proc.stderr
    assert TORCH_LINE in proc.stderr, proc.stderr
    shown = data["error"] + "\n" + "\n".join(data["lines"])
    assert "faulthandler, on in this program, wrote its Python stack at the crash to its " \
           "stderr (above)." in shown, shown
