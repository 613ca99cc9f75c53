"""The OOM-kill counters that a dead worker's verdict compares are read before it starts: once
for the workers a Pool starts together (one reading, shared), once for each other start, and a
fork child never takes its parent's reading for its own children. Each in a fresh interpreter,
bounded by a timeout."""
import subprocess
import sys

from testenv import child_env

SCRIPT = """\
import multiprocessing, os, sys
import mpcompat
from mpcompat.child_failures import channel


def before(pid):
    return channel.workers[pid].before


def in_worker(_):
    held = getattr(channel._held, "reading", None)
    # a reading the parent held as it forked this worker: never this process's
    return held is None or channel.snapshot()[1] is not held[1]


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    with context.Pool(3) as pool:
        readings = [before(w.pid) for w in pool._pool]
        fresh = pool.map(in_worker, range(3))
    process = context.Process(target=os.getpid)
    process.start()
    process.join()
    print(readings[0] is not None, all(r is readings[0] for r in readings),
          before(process.pid) is not readings[0], all(fresh))
"""


def test_a_pools_workers_share_one_reading_and_other_starts_read_their_own(tmp_path):
    path = tmp_path / "readings.py"
    path.write_text(SCRIPT)
    for method in ("fork", "forkserver"):
        proc = subprocess.run([sys.executable, str(path), method], env=child_env(),
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["True"] * 4, (method, proc.stdout, proc.stderr)
