"""concurrent_futures.interpreter_workers: Python 3.14's InterpreterPoolExecutor, real
subinterpreters. Dict views and modules travel both ways; an argument or a result that cannot
be pickled is named with its path, as for processes; what a task raises passes unchanged.

The scenario runs in a child interpreter: a subinterpreter's sys.path comes from the
interpreter's configuration (PYTHONPATH), not from the sys.path pytest extends."""
import json
import sys

import pytest

import mpcompat
from testenv import run_python

PATCH = "concurrent_futures.interpreter_workers"

SCENARIO = r'''
import collections, json, sys, threading, traceback
import mpcompat
from concurrent.futures import InterpreterPoolExecutor
from concurrent.interpreters import NotShareableError
import diagnose_workers as w

def outcome(future):
    exc = future.exception(timeout=60)
    if exc is None:
        return {"type": type(future.result()).__name__, "value": repr(future.result())}
    return {"type": type(exc).__name__, "message": str(exc),
            "notes": list(getattr(exc, "__notes__", ()))}

data = {}
with InterpreterPoolExecutor(1) as ex:
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    views = [{"x": 1, "y": 2}.keys(), {"x": 1}.values(), {"x": 1}.items(), ordered.keys(),
             ordered.items()]
    data["views"] = [[type(v).__name__, list(v), type(back) is type(v) and list(back) == list(v)]
                     for v in views for back in [ex.submit(w.echo, v).result(timeout=60)]]
    back = ex.submit(w.keys_of, {"p": 1, "q": 2}).result(timeout=60)
    data["view_result"] = [type(back).__name__, list(back)]
    data["module"] = ex.submit(w.echo, collections).result(timeout=60) is collections
    data["argument"] = outcome(ex.submit(w.echo, {"a": [w.Holder(lock=threading.Lock())]}))
    data["after_argument"] = ex.submit(w.add, 2, 3).result(timeout=60)
    data["result"] = outcome(ex.submit(w.lock_in_result))
    data["after_result"] = ex.submit(w.add, 1, 1).result(timeout=60)
    data["raised"] = outcome(ex.submit(w.raise_key_error))
    data["lambda"] = ex.submit(lambda: 7).result(timeout=60)
    data["plain"] = [repr(ex.submit(w.echo, v).result(timeout=60))
                     for v in (None, True, 3, 2.5, "s", b"b", (1, "t"), [1])]
print("RESULT " + json.dumps(data))
'''


def test_not_needed_before_3_14():
    rows = {p.name: (p.state, p.reason) for p in mpcompat.status().patches}
    if sys.version_info >= (3, 14):
        import concurrent.futures.interpreter  # noqa: F401
        rows = {p.name: (p.state, p.reason) for p in mpcompat.status().patches}
        assert rows[PATCH][0] == "applied"
    else:
        assert rows[PATCH] == ("not needed", "Python %d.%d.%d does not have the bug (needed for "
                               ">=3.14)" % sys.version_info[:3])


@pytest.fixture(scope="module")
def scenario():
    if sys.version_info < (3, 14):
        pytest.skip("InterpreterPoolExecutor is new in Python 3.14")
    result = run_python(SCENARIO, timeout=180)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    return json.loads(lines[0][len("RESULT "):])


def test_views_and_modules_travel_both_ways(scenario):
    assert [v[0] for v in scenario["views"]] == [
        "dict_keys", "dict_values", "dict_items", "odict_keys", "odict_items"]
    assert all(same for _, _, same in scenario["views"]), scenario["views"]
    assert scenario["view_result"] == ["dict_keys", ["p", "q"]]
    assert scenario["module"] is True


def flat(notes):
    return " ".join(" ".join(notes).split())


def test_an_argument_that_cannot_be_pickled_is_named(scenario):
    arg = scenario["argument"]
    assert arg["type"] == "NotShareableError"
    assert flat(arg["notes"]).startswith(
        "mpcompat: A task could not be sent to the InterpreterPoolExecutor's interpreters: "
        "pickling it failed. What cannot be pickled, and why: args[0]['a'][0].lock "
        "(_thread.lock object) error: TypeError: cannot pickle '_thread.lock' object hint: "
        "Locks, conditions, events and queue.Queue objects")
    assert scenario["after_argument"] == 5


def test_a_result_that_cannot_be_pickled_is_named(scenario):
    result = scenario["result"]
    assert result["type"] == "TypeError"
    assert result["message"] == "cannot pickle '_thread.lock' object"
    mine = [n for n in result["notes"] if n.startswith("mpcompat")]
    assert len(mine) == 1 and flat(mine).startswith(
        "mpcompat: The result of a task could not be sent back from its interpreter: pickling "
        "it failed. What cannot be pickled, and why: result['k'][0] (_thread.lock object)")
    assert scenario["after_result"] == 2


def test_what_a_task_raises_and_lambdas_are_unchanged(scenario):
    assert scenario["raised"] == {"type": "KeyError", "message": "'gone'", "notes": []}
    assert scenario["lambda"] == 7
    assert scenario["plain"] == ["None", "True", "3", "2.5", "'s'", "b'b'", "(1, 't')", "[1]"]
