"""Concurrent first imports never break mpcompat: fresh interpreters (the installed wheel,
activated by the first import mpcompat acts on), each with eight threads that make their
first imports at once, as fast as threads can switch. No import fails for mpcompat (no
``ModuleNotFoundError``, no error that names mpcompat), no patch is lost, nothing is written to
stderr: in 200 processes that import the standard library's targets and
OpenCV, and in 30 that import torch and nuscenes-devkit's data classes too (each of those
takes seconds; 200 of them ran clean while this test was written, see the issue-34 note in
benchmarks/README.md)."""
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

STDLIB = ["multiprocessing.pool", "copyreg", "pickle", "multiprocessing.spawn", "cv2",
          "multiprocessing.reduction", "concurrent.futures.process", "multiprocessing.forkserver"]
LIBRARIES = ["torch", "multiprocessing.pool", "nuscenes.eval.detection.data_classes", "copyreg",
             "pickle", "multiprocessing.spawn", "cv2", "multiprocessing.reduction"]


def _ours(error):
    """An import that failed for mpcompat: one of its modules not found, or its frames. The
    other failures are the modules racing themselves (CPython's import deadlock between
    multiprocessing's modules, a partly imported module, cv2's loader): as often with
    MPCOMPAT_DISABLE=1 (benchmarks/README.md, issue 34)."""
    return "ModuleNotFoundError" in error or "mpcompat" in error


@pytest.mark.parametrize("modules, runs", [(STDLIB, 200), (LIBRARIES, 30)],
                         ids=["stdlib-200", "torch-30"])
def test_eight_threads_of_first_imports_in_fresh_processes(installed, modules, runs):
    def run(number):
        try:
            proc = installed.script("first_imports.py", *modules, timeout=180)
        except subprocess.TimeoutExpired as exc:
            return "run %d hung for 180 s: %s" % (number, exc.stderr)
        out = json.loads(proc.stdout.strip() or "{}") if proc.returncode == 0 else {}
        ours = [e for e in out.get("errors", ["no output"]) if _ours(e)]
        if proc.returncode or proc.stderr or ours or out["lost"] or not out["active"]:
            return "run %d: exit %s, %s%s" % (number, proc.returncode, proc.stdout, proc.stderr)
    with ThreadPoolExecutor(2) as pool:  # two at a time: this machine's two cores
        bad = [problem for problem in pool.map(run, range(runs)) if problem]
    assert bad == [], "%d of %d runs:\n%s" % (len(bad), runs, "\n".join(bad[:5]))
