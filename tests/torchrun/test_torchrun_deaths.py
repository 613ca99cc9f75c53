"""torchrun's failure summary names a rank that died without an error file with what mpcompat
measured or noted (the ``torch.elastic_failures`` patch, in the agent)."""
import os
import subprocess
import sys

from pool_workers_helpers import _kill_group
from testenv import NEW_PICKLE_MESSAGES, child_env
from torchrun_helpers import SCRIPTS, root_cause, torchrun


def test_a_sigkilled_rank_is_named_with_its_measured_cause(tmp_path):
    # Rank 0 fails too, later, of "Connection reset by peer" (its error file is written by the
    # torch.elastic_errors patch): the root cause is still rank 1, though torch 1.9's agent
    # notices a death up to 5 s (its monitor interval) after it.
    proc = torchrun(tmp_path, "killed.py")
    cause = root_cause(proc)
    assert "rank      : 1 (local_rank: 1)" in cause or "rank: 1 (local_rank: 1)" in cause, \
        proc.stderr[-3000:]
    assert "Signal 9 (SIGKILL) received by PID" in cause
    assert "mpcompat: local rank 1 (pid " in cause and ") ended: killed by signal 9" in cause
    # The kernel log is readable here (else mpcompat says it has no evidence either way).
    assert "Not the OOM killer" in cause or "no evidence here of which" in cause


def test_a_function_entrypoint_start_up_failure_reaches_the_summary_with_its_fix(tmp_path):
    child = subprocess.Popen([sys.executable, "-m", "mpcompat", "run", "--", sys.executable,
                              os.path.join(SCRIPTS, "launch.py")],
                             env=child_env(OMP_NUM_THREADS="1"), cwd=str(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=180)
    finally:
        _kill_group(child, leftovers_only=child.poll() is not None)
    summary = stdout[stdout.find("SUMMARY"):]
    assert "Root Cause" in summary, stderr[-3000:]
    # "Can't get attribute 'Config' on <module '__mp_main__'" up to 3.13, then "module
    # '__mp_main__' has no attribute 'Config'"
    assert "failed while starting: AttributeError: " in summary
    assert ("'Config' on <module '__mp_main__'" in summary) != NEW_PICKLE_MESSAGES
    assert "Move the class Config to module level" in summary
