"""torchrun's failure summary names a rank that died without an error file with what mpcompat
measured or noted (the ``torch.elastic_failures`` patch, in the agent)."""
import os
import subprocess
import sys

import pytest

from exit_evidence_helpers import kernel_log_readable, make_cgroup, remove_cgroup
from pool_workers_helpers import _kill_group
from testenv import NEW_PICKLE_MESSAGES, child_env
from torchrun_helpers import SCRIPTS, root_cause, torchrun

# Run the rest in a mount namespace of its own where /dev/kmsg reads nothing.
HIDE_KMSG = 'mount --bind /dev/null /dev/kmsg && exec "$0" "$@"'


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
    # mpcompat's cause in place of torch's placeholder (torch 1.9: "Process failed with ...")
    assert "To enable traceback see" not in summary and "Process failed with" not in summary
    assert "traceback : mpcompat: torch.multiprocessing.spawn process (pid " in summary or \
        'msg: "mpcompat: torch.multiprocessing.spawn process (pid ' in summary, summary


def test_a_rank_crashed_in_native_code_is_named_with_its_python_stack(tmp_path):
    """A rank killed by a segfault writes no error file: the summary names the signal's
    meaning and the rank's Python stack at the crash, its own line first (faulthandler, armed
    in each rank at its start by mpcompat, writes it to a file beside the rank's error file,
    which the agent reads and removes)."""
    proc = torchrun(tmp_path, "crashed.py")
    cause = root_cause(proc)
    assert "rank      : 1 (local_rank: 1)" in cause or "rank: 1 (local_rank: 1)" in cause, \
        proc.stderr[-3000:]
    assert "SIGSEGV is a crash in native code" in cause, cause
    assert "It crashed in decode_frame() at %s:9: `return ctypes.string_at(0)  # the crash`" % (
        os.path.join(SCRIPTS, "crashed.py")) in cause, cause
    assert 'crashed.py", line 15 in <module>' in cause, cause
    assert "mpcompat" + os.sep not in cause
    # nothing of mpcompat's is left in the ranks' log directories
    left = [os.path.join(d, n) for d, _, names in os.walk(str(tmp_path / "logs"))
            for n in names if "mpcompat" in n]
    assert left == [], left


@pytest.mark.parametrize("kmsg", ["visible", "hidden"])
def test_a_rank_killed_by_the_oom_killer_is_named_with_the_evidence(tmp_path, kmsg):
    """Rank 1 moves itself into a memory cgroup limited to 200 MiB and allocates until the
    kernel's OOM killer kills it: the summary says so, with the kernel log's line and the
    limit; where the kernel log reads nothing (a mount namespace where it is /dev/null), the
    OOM counters the agent read before its ranks started tell a maybe."""
    cgroup = make_cgroup("mpcompat-test-%d-torchrun-oom-%s" % (os.getpid(), kmsg))
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here (no cgroup file system, or not root)")
    prefix = ["unshare", "-m", "sh", "-c", HIDE_KMSG] if kmsg == "hidden" else []
    try:
        proc = torchrun(tmp_path, "oom.py", script_args=[os.path.join(cgroup, "cgroup.procs")],
                        prefix=prefix)
    finally:
        remove_cgroup(cgroup)
    cause = root_cause(proc)
    assert "rank      : 1 (local_rank: 1)" in cause or "rank: 1 (local_rank: 1)" in cause, \
        proc.stderr[-3000:]
    assert "mpcompat: local rank 1 (pid " in cause, cause
    if kmsg == "hidden":
        assert "Maybe out of memory: the kernel's OOM killer may have killed it. Evidence: " \
            "/proc/vmstat's oom_kill went from " in cause, cause
    elif kernel_log_readable():
        assert "ended: killed by the kernel's OOM killer: signal 9, SIGKILL." in cause, cause
        assert "Out of memory: the kernel's OOM killer killed it. Evidence: the kernel log, " \
            "/dev/kmsg, names it:" in cause, cause
        assert "200.0 MiB" in cause, cause
    else:
        assert "no evidence here of which" in cause, cause
