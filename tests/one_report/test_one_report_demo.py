"""Issue 26, item 4: ``mpcompat demo`` shows its progress through a pipe (a line per scenario,
with the time so far, and the total). Standard library only. What its Pool scenario's timeout
means: test_one_report_demo_timeout.py."""
import re
import subprocess
import sys

from testenv import REPO, child_env


def test_demo_progress_reads_well_through_a_pipe():
    # a scenario of the standard library's that takes a second
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "demo", "views_pool"],
                          env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout
    assert re.match(r"^\[\d+\] Pool\(spawn\)\.map over records whose config keeps class_names = "
                    r"class_range\.keys\(\)  \(scenario 1 of 1, 0:00 so far\)$", lines[0]), \
        proc.stdout
    without = [line for line in lines if line.strip().startswith("without mpcompat:")]
    assert len(without) == 1 and "FAILED TypeError: cannot pickle 'dict_keys' object" in \
        without[0], proc.stdout
    assert "a worker hung" not in proc.stdout
    assert re.match(r"^1 of 1 scenarios work with mpcompat \(0:\d\d in all\)$", lines[-1]), \
        proc.stdout
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout  # no bar: plain lines
