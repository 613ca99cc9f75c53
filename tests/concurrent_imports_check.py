"""Runs ``tests/concurrent_imports.py`` many times and checks every run (shared by the
torch-free stress test in tests/core and the torch one in tests/torch_tests)."""
import json
import os
import subprocess
import sys

from testenv import TESTS, child_env

SCRIPT = os.path.join(TESTS, "concurrent_imports.py")


# CPython 3.8-3.11 (gh-91351, fixed in 3.12): a thread checking for an import deadlock can spin
# for ever in _ModuleLock.has_deadlock while it holds that lock's inner lock, when another thread
# is taking a module lock it already owns (multiprocessing's submodules importing their package
# while it initializes). The same script without mpcompat imported hung so 6 times in 1600 runs
# on Python 3.8; a run that hangs there is run again, any other hang fails the test.
RETRIES = 2


def run_many(seeds, targets, parallel=2, hang_after=60):
    """Run the script once per seed, ``parallel`` at a time; return the parsed outputs.

    A run that hangs for ``hang_after`` seconds fails the test with every thread's stack,
    unless it is CPython's own deadlock-detector spin (gh-91351, above), which is retried.
    """
    outputs, pending, retries = [], [(seed, 0) for seed in seeds], {}
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        procs = [(seed, attempt, _start(seed, targets, hang_after)) for seed, attempt in batch]
        for seed, attempt, proc in procs:
            try:
                out, err = proc.communicate(timeout=hang_after + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError("seed %d: the run neither ended nor dumped its stacks" % seed)
            if proc.returncode != 0 and _cpython_spin(err) and attempt < RETRIES:
                retries[seed] = attempt + 1
                pending.append((seed, attempt + 1))
                continue
            assert proc.returncode == 0, "seed %d:\n%s" % (seed, err)
            assert err == "", "seed %d wrote to stderr:\n%s" % (seed, err)
            outputs.append((seed, json.loads(out.strip().splitlines()[-1])))
    if retries:
        print("re-run after CPython's import-lock spin (gh-91351): %s" % retries)
    return outputs


def _start(seed, targets, hang_after):
    return subprocess.Popen([sys.executable, SCRIPT, str(seed)] + list(targets),
                            env=child_env(HANG_AFTER=str(hang_after)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)


def _cpython_spin(stderr):
    """Whether a hung run's stack dump shows a thread spinning in CPython's deadlock detector
    (a thread's innermost frame is _ModuleLock.has_deadlock), on a Python that has that bug."""
    if sys.version_info >= (3, 12) or not stderr.startswith("Timeout ("):
        return False
    lines = stderr.splitlines()
    return any(header.startswith(("Thread 0x", "Current thread 0x"))
               and "<frozen importlib._bootstrap>" in top and top.endswith(" in has_deadlock")
               for header, top in zip(lines, lines[1:]))


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
                state == "not needed" and (reason.endswith(" is not set") or
                                           "does not have the bug" in reason)), (
                seed, name, state, reason)
            continue
        assert state in ("applied", "not needed"), (seed, name, state, reason)
        if state == "applied":
            runs = sum(out["executions"][t] for t in imported)
            assert runs >= len(imported), (seed, name, out["executions"])
            assert applications == runs, (seed, name, applications, imported, runs)
