"""Patch ``opencv.worker_threads`` in forked children, without torch (runs on every venv).

A script in a child interpreter (``OPENCV_FOR_THREADS_NUM=3``: OpenCV's default is 3 threads
there and in its children) forks children with ``os.fork`` and a fork ``Process`` and reports
``cv2.getNumThreads()`` and ``cv2.ocl.useOpenCL()`` in each: 1 thread and OpenCL off with the
patch, the parent's 3 without it; the parent keeps 3 throughout. ``deactivate()`` disarms the
fork hook (it cannot be unregistered) and ``activate()`` arms it again.
"""
import json
import subprocess
import sys
import textwrap

from testenv import child_env

PATCH = "opencv.worker_threads"
RESULT = "RESULT "

SCRIPT = '''
import json, multiprocessing, os, sys
if sys.argv[1] == "cv2-first":
    import cv2
import mpcompat
import cv2

def state():
    return {"threads": cv2.getNumThreads(), "opencl": bool(cv2.ocl.useOpenCL())}

def os_fork():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, json.dumps(state()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as fh:
        return json.loads(fh.read())

def put_state(queue):
    queue.put(state())

def fork_process():
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    process = ctx.Process(target=put_state, args=(queue,))
    process.start()
    got = queue.get()
    process.join()
    return got

if __name__ == "__main__":
    from mpcompat.patching import states
    patch = [st for st in states(read_versions=False) if st.spec.name == "opencv.worker_threads"]
    result = {"state": patch[0].state if mpcompat.is_active() else "inactive",
              "parent": state(), "os_fork": os_fork(), "fork_process": fork_process()}
    if mpcompat.is_active():
        mpcompat.deactivate()
        result["deactivated"] = os_fork()
        mpcompat.activate()
        result["activated"] = os_fork()
    result["parent_after"] = state()
    print("RESULT " + json.dumps(result), flush=True)
'''


def run(tmp_path, order, **env):
    path = tmp_path / "forks.py"
    path.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(path), order],
                          env=child_env(OPENCV_FOR_THREADS_NUM="3", **env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, cwd=str(tmp_path))
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT)]
    assert lines and proc.returncode == 0, proc.stdout + proc.stderr
    assert "MpcompatWarning" not in proc.stderr, proc.stderr
    return json.loads(lines[-1][len(RESULT):])


ONE = {"threads": 1, "opencl": False}
THREE = {"threads": 3, "opencl": False}


def test_forked_children_run_opencv_single_threaded(tmp_path):
    for order in ("mpcompat-first", "cv2-first"):
        result = run(tmp_path, order)
        assert result["state"] == "applied", result
        assert result["parent"] == result["parent_after"] == THREE, result
        assert result["os_fork"] == result["fork_process"] == ONE, result
        assert result["deactivated"] == THREE, result  # the hook stays, disarmed
        assert result["activated"] == ONE, result


def test_forked_children_before(tmp_path):
    result = run(tmp_path, "mpcompat-first", MPCOMPAT_DISABLE="1")
    assert result["os_fork"] == result["fork_process"] == result["parent"] == THREE, result
    result = run(tmp_path, "mpcompat-first", MPCOMPAT_DISABLED_PATCHES=PATCH)
    assert result["state"] == "disabled"
    assert result["os_fork"] == result["fork_process"] == THREE, result
