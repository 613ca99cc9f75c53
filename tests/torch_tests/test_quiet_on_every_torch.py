"""Whatever torch the suite runs on (1.9.1, 2.6.0, 2.13.0, 2.14.1: .ci/test): importing torch
and every module a torch patch targets prints nothing, and each torch patch is applied or,
with its reason, not needed. A torch newer than the table's tested range must not change that
(issue 33: torch 2.14.1 once switched every torch fix off, with a warning per process)."""
from testenv import run_python

CODE = """
import torch, torch.utils.data, torch.multiprocessing.spawn, torch.serialization
import torch.distributed.elastic.multiprocessing.errors
import mpcompat
for p in mpcompat.status().patches:
    if p.name.startswith("torch."):
        print("ROW|%s|%s|%s" % (p.name, p.state, p.reason))
"""


def test_import_torch_is_quiet_and_every_torch_patch_applies_or_is_not_needed():
    proc = run_python("import mpcompat\n" + CODE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    rows = [line.split("|", 3)[1:] for line in proc.stdout.splitlines() if line.startswith("ROW|")]
    assert len(rows) >= 9, proc.stdout
    for name, state, reason in rows:
        assert state in ("applied", "not needed"), (name, state, reason)
        if state == "not needed":  # said why: an unset variable, or a torch without the bug
            assert reason.startswith(("MPCOMPAT_HANG_DUMP is not set",
                                      "TORCHELASTIC_ERROR_FILE is not set", "torch ")), (
                name, reason)
    import torch
    expected = "applied" if tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 4) \
        else "not needed"
    assert dict((n, s) for n, s, _ in rows)["torch.safe_globals"] == expected
