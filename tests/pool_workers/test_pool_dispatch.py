"""Issue 24, Pool start-up: the parent sends a task only to a worker that said it is ready, so
the first worker ready takes what waits, as it does from the standard library's shared pipe (a
spawn Pool(2) map of two tasks no longer waits for its second worker to start); workers that
never say so (mpcompat not active in them) still get every task. Real Pools, in fresh
interpreters where mpcompat activates in every process, as when it is installed."""
import os
import subprocess
import sys

import pytest

from pool_workers_helpers import RESULT, finish

FIRST_READY = '''\
import json, multiprocessing, os, sys, time

def fast_if_first(path):
    """The first worker to create ``path`` starts at once, the others after 30 s."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        time.sleep(30)

def pid_of(x):
    return os.getpid()

if __name__ == "__main__":
    pool = multiprocessing.get_context(sys.argv[1]).Pool(
        2, initializer=fast_if_first, initargs=(sys.argv[2],))
    pids = pool.map(pid_of, range(8), chunksize=1)
    pool.terminate()
    print("RESULT " + json.dumps({"pids": sorted(set(pids)), "count": len(pids)}))
'''

SILENT_WORKERS = '''\
import json, multiprocessing, sys

def double(x):
    return 2 * x

if __name__ == "__main__":
    import mpcompat
    ctx = multiprocessing.get_context("spawn")
    ctx.set_executable(sys.argv[1])  # an interpreter whose processes run without mpcompat
    with ctx.Pool(2) as pool:
        print("RESULT " + json.dumps({"active": mpcompat.is_active(),
                                      "map": pool.map(double, range(6))}))
'''


def run(tmp_path, source, *args):
    """Run ``source`` as a script where mpcompat starts with every interpreter (``mpcompat
    run``'s environment); return its report and the CompletedProcess."""
    from mpcompat.cli.launcher import command_env
    from testenv import child_env
    script = tmp_path / "scenario.py"
    script.write_text(source)
    child = subprocess.Popen([sys.executable, str(script)] + list(args),
                             env=command_env(child_env()), cwd=str(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, start_new_session=True)
    proc = finish(child, 120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    import json
    return (json.loads(lines[-1][len(RESULT):]) if lines else None), proc


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_the_first_worker_ready_takes_what_waits(method, tmp_path):
    """One worker is ready at once, the other only after 30 s: every task goes to the ready one
    (before: half of them waited for the slow one)."""
    data, proc = run(tmp_path, FIRST_READY, method, str(tmp_path / "first"))
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["count"] == 8 and len(data["pids"]) == 1, data


def test_workers_that_never_say_they_are_ready_still_get_every_task(tmp_path):
    """A parent where mpcompat starts with the interpreter expects its spawn workers to say
    they are ready; workers started by an interpreter without mpcompat never do: the tasks go
    to them all the same, UNHEARD seconds after the first one started."""
    wrapper = tmp_path / "python-without-mpcompat"
    wrapper.write_text("#!/bin/sh\nMPCOMPAT_DISABLE=1 exec %s \"$@\"\n" % sys.executable)
    os.chmod(str(wrapper), 0o755)
    data, proc = run(tmp_path, SILENT_WORKERS, str(wrapper))
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data == {"active": True, "map": [0, 2, 4, 6, 8, 10]}, data
