"""Patches ``opencv.worker_threads`` and ``torch.dataloader_workers`` (part b) on real
DataLoaders with real cv2: every worker runs OpenCV single-threaded with OpenCL off, under
fork, spawn and forkserver, whether cv2 is imported before the workers start or first inside
one; the main process keeps its own setting; a ``worker_init_fn`` that sets its own count wins.

The scripts run in child interpreters with ``OPENCV_FOR_THREADS_NUM=3`` (OpenCV's default count
there and in every worker, spawned or forked). Worker 1 of each loader runs a
``worker_init_fn`` that sets 2 threads; worker 0 runs none. The same loaders show the success
path of the worker-loop replacement: the samples arrive in order, made by mpcompat's loop.
"""
import json
import subprocess
import sys
import textwrap

from testenv import child_env

RESULT = "RESULT "

SCRIPT = '''
import json, sys
if sys.argv[1] == "eager":
    import cv2
import mpcompat
import torch.utils.data as data
import dataloader_helpers as helpers

def parent_threads():
    module = sys.modules.get("cv2")
    return module.getNumThreads() if module is not None else None

if __name__ == "__main__":
    result = {"parent_before": parent_threads(), "loaders": {}}
    for method in sys.argv[2:]:
        loader = data.DataLoader(helpers.OpenCVThreads(4), batch_size=None, num_workers=2,
                                 worker_init_fn=helpers.two_threads_in_worker_1,
                                 multiprocessing_context=method)
        result["loaders"][method] = [sample for sample in loader]
    result["parent_after"] = parent_threads()
    print("RESULT " + json.dumps(result), flush=True)
'''


def run(tmp_path, when, methods, **env):
    path = tmp_path / "opencv_workers.py"
    path.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(path), when] + list(methods),
                          env=child_env(OPENCV_FOR_THREADS_NUM="3", **env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=150, cwd=str(tmp_path))
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT)]
    assert lines and proc.returncode == 0, proc.stdout + proc.stderr
    assert "MpcompatWarning" not in proc.stderr, proc.stderr
    result = json.loads(lines[-1][len(RESULT):])
    assert sorted(result["loaders"]) == sorted(methods)
    return result


def by_worker(samples):
    """``{worker id: set of (threads, opencl)}``; also checks the samples' order and loop."""
    assert len(samples) == 4
    assert [s["worker"] for s in samples] == [0, 1, 0, 1]  # in order, round robin
    assert all(s["patched_loop"] for s in samples)
    found = {}
    for sample in samples:
        found.setdefault(sample["worker"], set()).add((sample["threads"], sample["opencl"]))
    return found


def test_workers_run_opencv_single_threaded_cv2_imported_first(tmp_path):
    result = run(tmp_path, "eager", ["fork", "spawn", "forkserver"])
    assert result["parent_before"] == result["parent_after"] == 3
    for method, samples in result["loaders"].items():
        assert by_worker(samples) == {0: {(1, False)}, 1: {(2, False)}}, method


def test_workers_run_opencv_single_threaded_cv2_imported_in_the_worker(tmp_path):
    result = run(tmp_path, "lazy", ["fork", "spawn"])
    assert result["parent_before"] is None and result["parent_after"] is None
    for method, samples in result["loaders"].items():
        assert by_worker(samples) == {0: {(1, False)}, 1: {(2, False)}}, method


def test_workers_before(tmp_path):
    result = run(tmp_path, "eager", ["fork", "spawn"],
                 MPCOMPAT_DISABLED_PATCHES="opencv.worker_threads")
    assert result["parent_before"] == result["parent_after"] == 3
    for method, samples in result["loaders"].items():
        assert by_worker(samples) == {0: {(3, False)}, 1: {(2, False)}}, method
