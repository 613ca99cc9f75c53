"""A ProcessPoolExecutor result (or task exception) that cannot be pickled: the parent's
exception carries the path to the part at fault (``result['lock']``, ``result[j]...`` for a
chunk of ``map``, ``exception.lock``) in its traceback, and the executor keeps working (the
explanation kept on the worker's error never makes that error unpicklable). Fork and spawn,
3.8-3.13, no torch.
"""
import pytest

from pool_workers_helpers import flat, run_script

EXECUTOR = '''\
import concurrent.futures, multiprocessing, sys
import mpcompat
from pool_workers_helpers import double, full_outcome, raise_with_lock, report, result_with_lock

if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as executor:
        data = {
            "submit": full_outcome(lambda: executor.submit(result_with_lock, 1).result(60)),
            "map": full_outcome(lambda: list(executor.map(result_with_lock, range(3),
                                                          chunksize=3))),
            "exception": full_outcome(lambda: executor.submit(raise_with_lock, 1).result(60)),
            "after": full_outcome(lambda: executor.submit(double, 21).result(60)),
        }
    report(data)
'''
LOCK = "(_thread.lock object)"


@pytest.fixture(scope="module", params=["fork", "spawn"])
def outcomes(request, tmp_path_factory):
    """The scenario's outcomes with mpcompat, and without it."""
    tmp = tmp_path_factory.mktemp("executor")
    after, proc = run_script(tmp, EXECUTOR, request.param, timeout=120)
    assert after is not None and proc.returncode == 0, proc.stderr[-3000:]
    before, proc = run_script(tmp, EXECUTOR, request.param, timeout=120, MPCOMPAT_DISABLE="1")
    assert before is not None and proc.returncode == 0, proc.stderr[-3000:]
    return before, after


def test_result_of_submit(outcomes):
    outcome = outcomes[1]["submit"]
    assert outcome["type"] == "TypeError", outcome
    text = flat(outcome["text"])
    assert "mpcompat: The result of a task could not be sent back to the main process: pickling " \
        "it failed. What cannot be pickled, and why: result['lock'] " + LOCK in text
    assert "hint: Locks, conditions, events" in text


def test_result_of_map_chunk(outcomes):
    outcome = outcomes[1]["map"]
    assert outcome["type"] == "TypeError", outcome
    text = flat(outcome["text"])
    assert "mpcompat: The result of a task of ProcessPoolExecutor.map could not be sent back to " \
        "the main process: pickling it failed (result[j] is the result of call j of this " \
        "task's chunk)." in text
    assert "result[0]['lock'] " + LOCK in text and "result[2]['lock'] " + LOCK in text


def test_exception_of_a_task(outcomes):
    outcome = outcomes[1]["exception"]
    assert outcome["type"] == "TypeError", outcome
    text = flat(outcome["text"])
    assert "mpcompat: The exception raised by a task could not be sent back to the main " \
        "process: pickling it failed." in text
    assert "exception.lock " + LOCK in text


def test_executor_keeps_working(outcomes):
    """Not BrokenProcessPool: the worker could send its error back."""
    assert outcomes[1]["after"]["value"] == outcomes[0]["after"]["value"] == "42"


def test_without_mpcompat_the_error_is_bare(outcomes):
    for name in ("submit", "map", "exception"):
        outcome = outcomes[0][name]
        assert outcome["type"] == "TypeError" and "mpcompat" not in outcome["text"]
