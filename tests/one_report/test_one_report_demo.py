"""Issue 26, item 4: ``mpcompat demo`` shows its progress through a pipe (a line per scenario,
with the time so far, and the total), and says what its Pool scenario's timeout means: the
respawn loop, not "a worker hung". Standard library only."""
import re
import subprocess
import sys

from testenv import REPO, child_env


def test_demo_progress_reads_well_through_a_pipe():
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "demo", "pool_initializer"],
                          env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout
    assert re.match(r"^\[\d+\] Pool\(initializer=open_db\) where the database file does not "
                    r"exist  \(scenario 1 of 1, 0:00 so far\)$", lines[0]), proc.stdout
    without = [line for line in lines if line.strip().startswith("without mpcompat:")]
    assert len(without) == 1 and "FAILED timed out after 15 s (the Pool kept restarting " \
        "workers that die in its initializer)" in without[0], proc.stdout
    assert "a worker hung" not in proc.stdout
    assert re.match(r"^1 of 1 scenarios work with mpcompat \(0:\d\d in all\)$", lines[-1]), \
        proc.stdout
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout  # no bar: plain lines
