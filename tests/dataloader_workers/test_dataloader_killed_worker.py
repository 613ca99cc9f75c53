"""A DataLoader worker that dies (killed by a signal: the OOM killer's SIGKILL, a segfault in an
extension, a SIGTERM from outside; or ``os._exit(3)``) still gets torch's own error; mpcompat
adds the worker's pid and how it ended, the signal by name with its likely cause, read from the
iterator's own worker processes. Torch names the exit code or signal only from its SIGCHLD
handler, which runs in the main thread: a DataLoader iterated in another thread ("/thread")
gets only "DataLoader worker (pid(s) N) exited unexpectedly" from torch. That handler raises
wherever the main thread is: a worker that dies while the loop's body runs ("/body": a training
step) raises torch's "is killed by signal" there, outside the iterator, and gains the same. Runs
in a child bounded by a timeout, num_workers=2."""
import sys

import pytest

from pool_workers_helpers import flat, run_script

SCENARIO = '''\
import os, subprocess, sys, threading, time, traceback
import torch
import mpcompat
from dataloader_helpers import EndsAtItem3
from pool_workers_helpers import report

KILL = "import os, signal, sys; os.kill(int(sys.argv[1]), signal.SIGTERM)"


def kill_from_outside(pid_file):
    """SIGTERM the worker from another process (torch's worker exits 0 on its parent's)."""
    while not os.path.exists(pid_file):
        time.sleep(0.05)
    with open(pid_file) as fh:
        subprocess.check_call([sys.executable, "-c", KILL, fh.read()])


def end_a_worker(method, case):
    how, _, where = case.partition("/")
    pid_file = "%s-%s-%s.pid" % (method, how, where)
    if os.path.exists(pid_file):
        os.remove(pid_file)
    if how == "outside":
        threading.Thread(target=kill_from_outside, args=(pid_file,), daemon=True).start()
    loader = torch.utils.data.DataLoader(EndsAtItem3(how, pid_file), batch_size=None,
                                         num_workers=2, multiprocessing_context=method)
    outcome = {}

    def iterate():
        try:
            if where == "body":
                for item in loader:
                    if item == 2:  # item 3's worker dies as this body runs
                        outcome["in body"], deadline = True, time.time() + 30
                        while time.time() < deadline:
                            time.sleep(0.05)
                        outcome["in body"] = False
            else:
                list(loader)
            outcome["text"] = "no error"
        except RuntimeError as exc:
            outcome["text"] = "".join(traceback.format_exception(type(exc), exc,
                                                                 exc.__traceback__))
    if where == "thread":
        thread = threading.Thread(target=iterate)
        thread.start()
        thread.join()
    else:
        iterate()
    with open(pid_file) as fh:
        return dict(outcome, pid=int(fh.read()))


if __name__ == "__main__":
    report({case: end_a_worker(sys.argv[1], case) for case in sys.argv[2:]})
'''
ENDS = {"SIGKILL": ("killed by signal 9 (SIGKILL)", "Not the OOM killer ("),
        "SIGSEGV": ("killed by signal 11 (SIGSEGV)", "Its Python stack at the crash ("),
        "exit3": ("exit code 3", ""), "outside": ("killed by signal 15 (SIGTERM)", "")}


# Under fork every way to end; under spawn (each DataLoader's two workers import torch: seconds)
# the crash, whose stack a spawn worker reads at its start.
@pytest.mark.parametrize("method,cases", [
    ("fork", ["SIGKILL", "exit3", "outside", "exit3/thread", "outside/thread", "SIGKILL/body"]),
    ("spawn", ["SIGSEGV"])], ids=["fork", "spawn"])
def test_a_dead_worker_keeps_torchs_error_and_gains_how_it_ended(tmp_path, method, cases):
    data, proc = run_script(tmp_path, SCENARIO, method, *cases, timeout=300)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    for case in cases:
        text = flat(data[case]["text"])
        if case.endswith("/body"):  # torch's SIGCHLD handler raised in the body
            assert data[case]["in body"] and "DataLoader worker (pid %d) is killed by signal: " \
                "Killed." % data[case]["pid"] in text, (case, text)
            if sys.version_info >= (3, 11):  # before, sys.excepthook leaves it out
                assert "torch_dataloader_workers.py" not in text, text
        else:  # torch's own error, as without mpcompat
            assert "DataLoader worker (pid(s) %d) exited unexpectedly" % data[case]["pid"] in \
                text, (case, text)
        ended, hint = ENDS[case.partition("/")[0]]
        assert "mpcompat: DataLoader worker (pid %d) ended: %s." % (
            data[case]["pid"], ended) in text and hint in text, (case, text)
