"""Programs that never call set_start_method, on the Python running the tests: forkserver on
Linux from 3.14 (fork before). A clean program hears nothing from mpcompat and every patch is
applied, waiting for import or not needed; a Pool whose initializer raises breaks with the
workers' error; a class defined under the main guard is named with its line where the start
method pickles it."""
import json
import multiprocessing
import subprocess
import sys

from pool_workers_helpers import flat
from testenv import child_env

CLEAN = '''
import json, multiprocessing, sys
import mpcompat

def double(x):
    return 2 * x

if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        doubled = pool.map(double, range(6))
    print("RESULT " + json.dumps({
        "method": multiprocessing.get_start_method(), "doubled": doubled,
        "states": sorted({p.state for p in mpcompat.status().patches})}))
'''

FAILING = '''
import json, multiprocessing, sys, traceback
import mpcompat

def fail():
    raise ValueError("no database here")

def double(x):
    return 2 * x

def twice_value(task):
    return 2 * task.value

if __name__ == "__main__":
    class Task(object):
        value = 21

    def outcome(call):
        try:
            return {"value": repr(call())}
        except Exception as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc))
            return {"type": type(exc).__name__, "text": text}

    data = {"method": multiprocessing.get_start_method()}
    with multiprocessing.Pool(2, initializer=fail) as pool:
        data["initializer"] = outcome(lambda: pool.map_async(double, range(4)).get(60))
        pool.terminate()
    with multiprocessing.Pool(2) as pool:
        data["guarded"] = outcome(lambda: pool.apply_async(twice_value, (Task(),)).get(60))
        pool.terminate()
    print("RESULT " + json.dumps(data))
'''


def run(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    proc = subprocess.run([sys.executable, str(script)], env=child_env(), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=240)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stdout + proc.stderr[-3000:]
    return json.loads(lines[0][len("RESULT "):]), proc


def test_a_clean_program_hears_nothing(tmp_path):
    data, proc = run(tmp_path, CLEAN)
    assert data["method"] == multiprocessing.get_start_method()
    assert data["doubled"] == [0, 2, 4, 6, 8, 10]
    assert set(data["states"]) <= {"applied", "waiting for import", "not needed"}, data
    assert proc.stderr == ""


def test_failing_initializer_and_main_guard_class(tmp_path):
    data, proc = run(tmp_path, FAILING)
    method = data["method"]
    assert method == multiprocessing.get_start_method()
    init = data["initializer"]
    assert init["type"] == "BrokenPool", data
    assert "ValueError: no database here" in flat(init["text"])
    guarded = data["guarded"]
    if method == "fork":  # the child has the class: nothing to name
        assert guarded == {"value": "42"}, data
        return
    text = flat(guarded["text"])
    assert guarded["type"] == "AttributeError", data
    assert 'class Task is defined inside `if __name__ == "__main__":` of %s, line 15' % (
        tmp_path / "train.py") in text, text
