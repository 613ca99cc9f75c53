"""mmcv's ``track_parallel_progress`` (UniAD's data preparation) sits on ``Pool.imap``: a worker
killed in the middle of the job made it wait for ever. With mpcompat it raises the lost task's
WorkerLostError (mmcv 1.7.2 on Python 3.11, 1.4.0 on 3.8). Each run is a child bounded by a
timeout; without the patch the job's own watchdog reports the hang."""
import mmcv  # noqa: F401  (the library under test must be installed)

from pool_workers_helpers import flat, run_script

JOB = '''\
import os, sys, threading
import mpcompat
import mmcv
from pool_workers_helpers import die, outcome, report

if __name__ == "__main__":
    def watchdog():  # without the patch the job never ends: say so, and end it
        print()  # after mmcv's progress bar
        report({"job": {"type": "hang"}})
        os._exit(0)
    timer = threading.Timer(float(sys.argv[1]), watchdog)
    timer.daemon = True
    timer.start()
    tasks = [1, 2, 3, "SIGKILL", 5, 6]
    data = {"job": outcome(lambda: mmcv.track_parallel_progress(die, tasks, nproc=2))}
    timer.cancel()
    print()
    report(data)
'''


def test_a_worker_killed_mid_job_raises_instead_of_hanging(tmp_path):
    data, proc = run_script(tmp_path, JOB, 60, timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["job"]["type"] == "WorkerLostError", data
    assert "killed by signal 9 (SIGKILL)" in flat(data["job"]["text"])
    before, proc = run_script(tmp_path, JOB, 5, timeout=180,
                              MPCOMPAT_DISABLED_PATCHES="multiprocessing.pool_workers")
    assert before == {"job": {"type": "hang"}}, proc.stderr[-3000:]
