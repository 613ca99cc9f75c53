"""Issue 26, item 4: ``mpcompat demo`` says what its Pool scenario's timeout means: the respawn
loop, not "a worker hung". Standard library only; 15 s of the scenario's own timeout, so it runs
where the whole suite runs (Python 3.11 and 3.14 in CI), not in each standard-library stage."""
import subprocess
import sys

from testenv import REPO, child_env


def test_the_pool_scenarios_timeout_names_the_respawn_loop():
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "demo", "pool_initializer"],
                          env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180)
    assert proc.returncode == 0, proc.stdout
    without = [line for line in proc.stdout.splitlines()
               if line.strip().startswith("without mpcompat:")]
    assert len(without) == 1 and "FAILED timed out after 15 s (the Pool kept restarting " \
        "workers that die in its initializer)" in without[0], proc.stdout
    assert "a worker hung" not in proc.stdout
