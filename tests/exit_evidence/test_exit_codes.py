"""A worker that exits with a code is named with what the code means where Python defines it:
1 (an uncaught exception, with the worker's recorded error), 255 (exit(-1)), its own sys.exit(7)
(recorded), and 3 (no code of Python's: the worker's code chose it). A Pool (the default start
method) and a ProcessPoolExecutor; each scenario runs in a child bounded by a timeout."""
import sys

import pytest

from pool_workers_helpers import flat, run_script

SCENARIO = '''\
import concurrent.futures as cf, multiprocessing, sys
import mpcompat
from exit_evidence_helpers import end_worker
from pool_workers_helpers import full_outcome, report


def run(kind, how):
    if kind == "pool":
        with multiprocessing.Pool(1) as pool:
            return full_outcome(lambda: pool.apply(end_worker, (how,)))["text"]
    with cf.ProcessPoolExecutor(1) as executor:
        return full_outcome(lambda: executor.submit(end_worker, how).result(60))["text"]


if __name__ == "__main__":
    report({how: run(sys.argv[1], how) for how in sys.argv[2:]})
'''
OTHER = ("Exit code 3: not one Python itself exits with (it uses 1 for an uncaught exception, "
         "120 for a failed flush at exit): the worker's code, or a library it called, chose it "
         "(os._exit(3), exit(3) in C, or sys.exit(3)).")
POOL = {
    "raise": ("(exit code 1)", "Exit code 1: an exception nobody caught ended it (Python's exit "
              "code for that). The worker's own error: Fatal: the task gave up (while running a "
              "task)"),
    "exit3": ("(exit code 3)", OTHER),
    "exit255": ("(exit code 255)", "Exit code 255: it exited with -1 (sys.exit(-1), os._exit(-1) "
                "or a C library's exit(-1): an exit status is 0-255, so -1 reads 255)"),
    "sys.exit7": ("(exit code 7)", "Exit code 7: the worker raised SystemExit itself "
                  "(sys.exit()). The worker's own error: SystemExit: 7 (while running a task)"),
}


def test_a_pool_workers_exit_code_is_named(tmp_path):
    data, proc = run_script(tmp_path, SCENARIO, "pool", *POOL, timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    for how, (code, meaning) in POOL.items():
        text = flat(data[how])
        assert "WorkerLostError: the Pool worker process" in text and code in text, (how, text)
        assert meaning in text, (how, text)


@pytest.mark.skipif(sys.version_info < (3, 9), reason="3.8's executor has no hook")
def test_an_executor_workers_exit_code_is_named(tmp_path):
    # A task's own exception or sys.exit() goes back to its future: only os._exit() ends one.
    data, proc = run_script(tmp_path, SCENARIO, "executor", "exit3", timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    text = flat(data["exit3"])
    assert " ended: exit code 3. " + OTHER in text, text
