"""Runs ``tests/concurrent_imports.py`` many times and checks every run (shared by the
torch-free stress test in tests/core and the torch one in tests/torch_tests)."""
import json
import os
import subprocess
import sys

from testenv import TESTS, child_env

SCRIPT = os.path.join(TESTS, "concurrent_imports.py")


def run_many(seeds, targets, parallel=2, timeout=240):
    """Run the script once per seed, ``parallel`` at a time; return the parsed outputs."""
    outputs, pending = [], list(seeds)
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        procs = [subprocess.Popen([sys.executable, SCRIPT, str(seed)] + list(targets),
                                  env=child_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True)
                 for seed in batch]
        for seed, proc in zip(batch, procs):
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError("seed %d: the imports hung (deadlock?)" % seed)
            assert proc.returncode == 0, "seed %d:\n%s" % (seed, err)
            assert err == "", "seed %d wrote to stderr:\n%s" % (seed, err)
            outputs.append((seed, json.loads(out.strip().splitlines()[-1])))
    return outputs


def check(seed, out):
    """Every patch whose targets were imported applied exactly once per execution of a
    target's code (or is not needed here); nothing was missed, skipped or failed; no warning;
    no import error."""
    assert out["errors"] == [], (seed, out["errors"])
    assert out["imported_before"] == [], (seed, out["imported_before"])
    assert out["warnings"] == [], (seed, out["warnings"])
    modules = set(out["modules"])
    for name, (state, applications, reason, targets) in out["rows"].items():
        imported = [t for t in targets if t in modules]
        if not imported:
            assert state == "waiting for import" or (
                state == "not needed" and reason == "MPCOMPAT_HANG_DUMP is not set"), (
                seed, name, state, reason)
            continue
        assert state in ("applied", "not needed"), (seed, name, state, reason)
        if state == "applied":
            runs = sum(out["executions"][t] for t in imported)
            assert runs >= len(imported), (seed, name, out["executions"])
            assert applications == runs, (seed, name, applications, imported, runs)
