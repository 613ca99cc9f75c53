"""Objects defined under ``if __name__ == "__main__":``: the script's analysis
(mpcompat.diagnose.main_guard), ``explain`` in a real main script, ``mpcompat explain``."""
import json
import subprocess
import sys
import textwrap

import pytest

from mpcompat.diagnose import main_guard
from testenv import NEW_PICKLE_MESSAGES, REPO, child_env, missing_in_main

SOURCE = '''\
import os
import json as j, collections.abc
from pickle import dumps as d
A = B = 1
(C, [D, *E]), F.attr, G[0] = (1, [2, 3]), 4, 5
H: int = 1
I: int
for K in range(2):
    pass
with open(__file__) as L:
    pass
try:
    import M
except ImportError as N:
    M = None


def f():
    inner = 1


class Kept(object):
    pass


if __name__ == "__main__":
    class Task(object):
        x = 1

    def helper():
        pass

    task = Task()
    Kept = Kept
    for row in range(2):
        class Loop(object):
            pass
    try:
        from json import loads
    except ImportError:
        loads = None
elif os.name == "nt":
    class OnWindows(object):
        pass
if "__main__" != __name__:
    class Imported(object):
        pass
else:
    class Guarded(object):
        pass
'''


def test_analysis_of_module_level_bindings(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SOURCE)
    analysis = main_guard.analyze(str(path))
    outside = {name: (b.line, b.kind) for name, b in analysis.outside.items()}
    assert outside == {
        "os": (1, "name"), "j": (2, "name"), "collections": (2, "name"), "d": (3, "name"),
        "A": (4, "name"), "B": (4, "name"), "C": (5, "name"), "D": (5, "name"),
        "E": (5, "name"), "H": (6, "name"), "K": (8, "name"), "L": (10, "name"),
        "M": (13, "name"), "N": (14, "name"), "f": (18, "function"), "Kept": (22, "class"),
        "OnWindows": (43, "class"), "Imported": (46, "class")}
    inside = {name: (b.line, b.kind, b.guard_line) for name, b in analysis.inside.items()}
    assert inside == {
        "Task": (27, "class", 26), "helper": (30, "function", 26), "task": (33, "name", 26),
        "Kept": (34, "name", 26), "row": (35, "name", 26), "Loop": (36, "class", 26),
        "loads": (39, "name", 26), "Guarded": (49, "class", 45)}
    assert analysis.guards == [26, 45]
    assert analysis.only_inside("Task").line == 27
    assert analysis.only_inside("Kept") is None  # bound outside as well: children have it
    assert main_guard.guarded("Task.x", str(path)).line == 27
    assert main_guard.guarded_definitions(str(path)) == {"Task", "helper", "Loop", "Guarded"}


def test_analysis_is_cached_per_file_and_change(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SOURCE)
    first = main_guard.analyze(str(path))
    assert main_guard.analyze(str(path)) is first
    path.write_text(SOURCE + "\nif __name__ == '__main__':\n    class Late(object):\n"
                             "        pass\n")
    second = main_guard.analyze(str(path))
    assert second is not first and second.inside["Late"].line == 53
    (tmp_path / "broken.py").write_text("if __name__ == '__main__':\n    class (:\n")
    assert main_guard.analyze(str(tmp_path / "broken.py")) is None
    assert main_guard.analyze(str(tmp_path / "missing.py")) is None
    assert main_guard.guarded("Task", str(tmp_path / "missing.py")) is None


SCRIPT = '''\
import multiprocessing
import sys
import mpcompat


def work(item=None):
    return item


class Top(object):
    pass


if __name__ == "__main__":
    class Task(object):
        class Inner(object):
            pass

    def helper():
        pass

    class Top(object):  # bound at module level too: children find a Top
        pass

    job = {"task": Task(), "fn": helper, "inner": Task.Inner, "fine": [work, Top()]}
    print(mpcompat.explain(job, name="job"))
    print(mpcompat.explain({"fine": [work, Top(), "Task", "__main__"]}, name="clean"))
    try:
        mpcompat.assert_picklable(Task(), name="task")
    except AssertionError as exc:
        print("assert_picklable raised:", str(exc).splitlines()[0])
    # ... and that is what really happens in a spawn child:
    process = multiprocessing.get_context("spawn").Process(target=work, args=(Task(),))
    process.start()
    process.join()
    print("exitcode", process.exitcode)
'''


def run_script(tmp_path, source, *args, **env):
    path = tmp_path / "train.py"
    path.write_text(source)
    result = subprocess.run([sys.executable, str(path)] + list(args), env=child_env(**env),
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=120)
    return result, str(path)


def flat(text):
    return " ".join(text.split())


def test_explain_reports_what_the_main_guard_defines(tmp_path):
    result, path = run_script(tmp_path, SCRIPT)
    out = result.stdout
    assert "job cannot be pickled: 3 problems found." in out, out + result.stderr
    paths = [line.split("  (")[0].strip() for line in out.splitlines()
             if line.startswith("  job")]
    assert paths == ["job['task']", "job['fn']", "job['inner']"]
    assert "job['task']  (__main__.Task object)" in out
    assert ("error: MainReference: class __main__.Task is pickled as a reference to "
            "__main__.Task, defined inside `if __name__ == \"__main__\":` at train.py:15, which "
            "spawn and forkserver children do not run") in out
    text = flat(out)
    assert ("class Task is defined inside `if __name__ == \"__main__\":` of %s, line 15. "
            "Spawn and forkserver child processes import train.py as __mp_main__ without "
            "running that block" % path) in text
    assert ("Move the class Task to module level (above the `if __name__ == \"__main__\":` of "
            "line 14), or into a module that train.py imports.") in text
    assert "function helper is defined inside `if __name__ == \"__main__\":` of %s, line 19" \
        % path in text
    assert "Task.Inner (the class Task it belongs to) is defined inside" in text
    assert "clean can be pickled." in out
    assert "assert_picklable raised: task cannot be pickled: 1 problem found." in out
    assert "exitcode 1" in out
    assert "AttributeError: " + missing_in_main("Task") in result.stderr


def test_explain_is_unchanged_where_the_main_module_has_no_file():
    code = textwrap.dedent('''\
        import mpcompat
        class Config(object):
            pass
        print(mpcompat.explain(Config(), name="config"))
    ''')
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=60)
    assert "config cannot be pickled: 1 problem found." in result.stdout, result.stderr
    assert "defined in __main__, which spawn and forkserver children cannot import here" in \
        flat(result.stdout)


def explain_cli(tmp_path, target):
    return subprocess.run([sys.executable, "-m", "mpcompat", "explain", target],
                          env=child_env(), cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def test_mpcompat_explain_names_what_the_main_guard_defines(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    path = str(tmp_path / "train.py")
    result = explain_cli(tmp_path, "train:Task")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert out.startswith("Task cannot be pickled for spawn or forkserver children: 1 problem "
                          "found.\n  Task  (class Task, defined inside `if __name__ == "
                          "\"__main__\":` of train.py, line 15)\n      hint:  class Task is")
    assert "Move the class Task to module level" in flat(out) and path in flat(out)
    result = explain_cli(tmp_path, "train:job")
    assert result.returncode == 2 and result.stdout == ""
    err = flat(result.stderr)
    assert ("job is created inside `if __name__ == \"__main__\":` of %s, line 25, which runs "
            "only when train.py is the main script" % path) in err
    assert "class Task (line 15), function helper (line 19); define them at module level" in err
    result = explain_cli(tmp_path, "train:Top")
    assert result.returncode == 0 and result.stdout == "Top can be pickled.\n"
    result = explain_cli(tmp_path, "train:missing")
    assert result.returncode == 2
    assert "cannot get attribute 'missing'" in result.stderr


NO_MAIN_FILE = '''
import json, multiprocessing, sys, traceback

def double(x):
    return 2 * x

def setup():
    pass

def outcome(call):
    try:
        return {"value": repr(call())}
    except Exception as exc:
        return {"type": type(exc).__name__,
                "text": "".join(traceback.format_exception_only(type(exc), exc))}

def with_initializer(ctx):
    # the Pool may be broken before its with block starts (the workers fail at once)
    with ctx.Pool(2, initializer=setup) as pool:
        return pool.map_async(abs, range(3)).get(60)

ctx = multiprocessing.get_context(sys.argv[1])
data = {}
with ctx.Pool(2) as pool:
    data["task"] = outcome(lambda: pool.map(double, range(3)))
data["initializer"] = outcome(lambda: with_initializer(ctx))
print("RESULT " + json.dumps(data))
'''


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_python_c_children_that_cannot_import_main_get_the_fix(method):
    """``python -c`` (also a notebook, a REPL): the children have no main module to import, so a
    function of __main__ is missing there. mpcompat active in the children (``mpcompat run``,
    as an installed .pth does): the task's error and the Pool's carry the fix."""
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "run", "--", sys.executable, "-c",
                           NO_MAIN_FILE, method], env=child_env(), cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=240)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stdout + proc.stderr[-3000:]
    data = json.loads(lines[0][len("RESULT "):])
    fix = ("which spawn and forkserver children cannot import here (the program runs from python "
           "-c, an interactive session or a notebook), so the child fails with \"AttributeError: "
           "%s\". Move it into a module (a .py file next to the script or notebook) and import "
           "it from there.")
    task = flat(data["task"]["text"])
    assert data["task"]["type"] == "AttributeError", data
    assert "mpcompat: double is defined in __main__, " + fix % (
        missing_in_main("double", "__main__") + (">" if not NEW_PICKLE_MESSAGES else "")) \
        in task, task
    init = flat(data["initializer"]["text"])
    assert data["initializer"]["type"] == "BrokenPool", data
    assert "mpcompat: setup is defined in __main__, " + fix % (
        missing_in_main("setup", "__main__") + (">" if not NEW_PICKLE_MESSAGES else "")) \
        in init, init
