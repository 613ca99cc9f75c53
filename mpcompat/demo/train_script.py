"""Runs a demo scenario's script the way a user runs their own ``train.py``."""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run_train_script(source, args=(), timeout=25):
    """Run ``source`` as the main script ``train.py`` of a temporary directory, with mpcompat
    active at start-up in all its processes unless MPCOMPAT_DISABLE is set; return ``(outcome,
    stderr, path)``: the JSON of its last ``OUTCOME {...}`` line, its stderr and its path.

    Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds, and RuntimeError when the
    script printed no outcome.
    """
    from mpcompat.cli.launcher import command_env
    directory = tempfile.mkdtemp(prefix="mpcompat-demo-")
    path = os.path.join(directory, "train.py")
    try:
        with open(path, "w") as fh:
            fh.write(source)
        proc = subprocess.run([sys.executable, path] + [str(a) for a in args],
                              env=command_env(os.environ), cwd=directory,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("OUTCOME ")]
    if not lines:
        raise RuntimeError("the script printed no outcome (exit code %s): %s" % (
            proc.returncode, proc.stderr.strip().splitlines()[-1:]))
    return json.loads(lines[-1][len("OUTCOME "):]), proc.stderr, path
