"""A Pool result (or task exception) that cannot be pickled: the MaybeEncodingError the parent
raises names the part at fault (``result['lock']``, ``result[j]...`` for a map chunk,
``exception.lock``) with the hint, under fork and spawn (3.8-3.13, no torch).

The note is made in the worker (patch ``multiprocessing.pickling_notes`` explains the pickling
error there) and travels with the MaybeEncodingError (patch ``multiprocessing.pool_workers``).
"""
import pytest

from pool_workers_helpers import flat, run_script

RESULTS = '''\
import multiprocessing, sys
import mpcompat
from pool_workers_helpers import double, outcome, raise_with_lock, report, result_with_lock

if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
        data = {
            "apply": outcome(lambda: pool.apply(result_with_lock, (1,))),
            "map": outcome(lambda: pool.map(result_with_lock, range(4), chunksize=2)),
            "exception": outcome(lambda: pool.apply(raise_with_lock, (1,))),
            "after": outcome(lambda: pool.apply(double, (21,))),
        }
    report(data)
'''
LOCK = "(_thread.lock object)"
REASON = "Reason: 'TypeError(\"cannot pickle '_thread.lock' object\")'"


@pytest.fixture(scope="module", params=["fork", "spawn"])
def outcomes(request, tmp_path_factory):
    """The scenario's outcomes with mpcompat, and with the patch disabled."""
    tmp = tmp_path_factory.mktemp("results")
    after, proc = run_script(tmp, RESULTS, request.param, timeout=120)
    assert after is not None and proc.returncode == 0, proc.stderr[-3000:]
    before, proc = run_script(tmp, RESULTS, request.param, timeout=120,
                              MPCOMPAT_DISABLED_PATCHES="multiprocessing.pool_workers")
    assert before is not None and proc.returncode == 0, proc.stderr[-3000:]
    return before, after


def check(outcome):
    """The flattened text of a MaybeEncodingError outcome, checked for the common parts."""
    assert outcome["type"] == "MaybeEncodingError", outcome
    text = flat(outcome["text"])
    assert text.count("mpcompat:") == 1, text
    assert REASON in text  # the pickling error's repr, without the note
    # The reason above names the error: the note does not repeat it.
    assert "error: TypeError: cannot pickle '_thread.lock' object" not in text
    assert "hint: Locks, conditions, events" in text
    return text


def test_result_of_apply(outcomes):
    text = check(outcomes[1]["apply"])
    assert "mpcompat: The result of a task could not be sent back to the main process: pickling " \
        "it failed. What cannot be pickled, and why: result['lock'] " + LOCK in text


def test_result_of_map_chunk(outcomes):
    text = check(outcomes[1]["map"])
    assert "mpcompat: The result of task 0 of a Pool map could not be sent back to the main " \
        "process: pickling it failed (result[j] is the result for item j of the chunk" in text
    assert "result[0]['lock'] " + LOCK in text and "result[1]['lock'] " + LOCK in text


def test_exception_of_a_task(outcomes):
    text = check(outcomes[1]["exception"])
    assert "mpcompat: The exception raised by a task could not be sent back to the main " \
        "process: pickling it failed." in text
    assert "exception.lock " + LOCK in text


def test_pool_keeps_working(outcomes):
    assert outcomes[0]["after"]["value"] == outcomes[1]["after"]["value"] == "42"


def test_without_the_patch_the_error_is_bare(outcomes):
    """Only repr() of the pickling error (on 3.8-3.10 its message holds the note, escaped into
    one line: "Reason: 'TypeError("cannot pickle ...\\nmpcompat: ...")'")."""
    before = outcomes[0]
    for name in ("apply", "map", "exception"):
        assert before[name]["type"] == "MaybeEncodingError"
        lines = before[name]["text"].splitlines()
        assert len(lines) == 1 and "Reason: 'TypeError(" in lines[0], lines


def test_message_comes_first_then_the_note(outcomes):
    """The note follows the message (3.11+: a note; 3.8-3.10: MaybeEncodingError.__str__)."""
    lines = outcomes[1]["apply"]["text"].splitlines()
    assert lines[0].startswith("multiprocessing.pool.MaybeEncodingError: Error sending result: ")
    assert lines[0].endswith(REASON)
    assert lines[1].startswith("mpcompat: The result of a task")
