"""A broken install, whatever part of it is broken and whenever that part loads: the program
runs to its end, and the fault is said once, where the user reads it.

- A file the start-up hook loads (``import mpcompat``, at the first import of a module mpcompat
  acts on: pickle here): one line on stderr naming the file, mpcompat off in this process tree.
- A file loaded later, inside the package: an import error is an error. Loaded for a library
  import (the patch manager, a patch), it is one warning naming the file, the library's import
  goes on, and mpcompat stays on; loaded by a call of the API (``mpcompat.explain``), that call
  raises it.

Faults are injected into a wheel installed in a venv of its own: each file of the package that
a program using mpcompat loads gets, in turn, a syntax error appended, then a ``raise`` at the
end of its code; the file is put back after each run.
"""
import json
import os
import subprocess
import sys

import pytest

PROGRAM = r"""
import sys
started = sorted(m for m in sys.modules if m.startswith(("mpcompat", "_mpcompat")))
import pickle  # the first import mpcompat acts on (it pickles): it activates
activated = sorted(m for m in sys.modules if m.startswith(("mpcompat", "_mpcompat")))
import json, pickle, traceback
out = {"started": started, "activated": activated}
def step(name, fn):
    try:
        out[name] = fn()
    except BaseException as exc:  # what the user reads: the error, and the innermost file
        out[name] = "error: %s: %s (%s)" % (type(exc).__name__, exc,
                                            traceback.extract_tb(exc.__traceback__)[-1][0])
step("view", lambda: list(pickle.loads(pickle.dumps({"a": 1}.keys()))))
import multiprocessing.reduction, multiprocessing.spawn, multiprocessing.pool
import concurrent.futures.process
# the first use of what a patch hooks loads its module (mp_children)
step("dumps", lambda: bytes(multiprocessing.reduction.ForkingPickler.dumps(1)) != b"")
if "--no-import" not in sys.argv:
    import mpcompat
    step("explain", lambda: mpcompat.explain(lambda: 0).ok)
    step("per_process", lambda: mpcompat.per_process(dict, a=1)["a"])
    step("status", lambda: str(mpcompat.status()))
    out["active"] = mpcompat.is_active()
out["modules"] = sorted(m for m in sys.modules if m.startswith(("mpcompat", "_mpcompat")))
out["end"] = True
print(json.dumps(out))
"""

FAULTS = {"syntax error": "\ndef broken(:\n", "raise at import": "\nraise RuntimeError('injected')\n"}


@pytest.fixture(scope="module")
def faulty(make_venv, wheel, tmp_path_factory):
    """A venv of its own (its files get broken and mended) and the program's path."""
    venv = make_venv(wheel=wheel)
    program = str(tmp_path_factory.mktemp("faults") / "program.py")
    with open(program, "w") as f:
        f.write(PROGRAM)
    return venv, program


def _run(venv, program, *args):
    proc = venv.run(["python", program] + list(args), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["end"] is True
    return out, proc.stderr


def _loaded_files(venv, program):
    """``{file: whether it loaded with pickle's import}`` for the files the program loads, as
    relative paths; nothing of the package loads at interpreter start."""
    out, stderr = _run(venv, program)
    assert stderr == "" and out["active"] is True and out["view"] == ["a"], (out, stderr)
    assert out["started"] == ["_mpcompat_bootstrap"], out["started"]
    files = {}
    for name in out["modules"]:
        if name == "_mpcompat_bootstrap":
            continue
        parts = name.split(".")
        base = os.path.join(venv.site_packages, *parts)
        path = os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"
        assert os.path.isfile(path), path
        files[os.path.relpath(path, venv.site_packages)] = name in out["activated"]
    return files


def _broken(venv, program, relpath, text, *args):
    path = os.path.join(venv.site_packages, relpath)
    with open(path) as f:
        original = f.read()
    try:
        with open(path, "w") as f:
            f.write(original + text)
        return _run(venv, program, *args)
    finally:
        with open(path, "w") as f:
            f.write(original)


def test_every_loaded_file_broken_in_turn_is_said_once_and_the_program_runs_on(faulty):
    venv, program = faulty
    files = _loaded_files(venv, program)
    activated = sorted(f for f, with_pickle in files.items() if with_pickle)
    # what the start-up hook's import of mpcompat loads (copyreg's callback, which registers
    # the built-in reducers, loads nothing more); the registry's functions load with status()
    started = [os.path.join("mpcompat", name)
               for name in ("__init__.py", "activation.py", "rebuild_views.py")]
    assert activated == sorted(started)
    later = sorted(f for f in files if f not in started)
    for needed in ("patching.py", "reducers.py", "diagnose/walker.py",
                   "pickling/per_process.py", "patches/mp_children.py"):
        assert os.path.join("mpcompat", needed) in later
    failures = []
    for relpath in started + later:
        for fault, text in FAULTS.items():
            at_start = relpath in started
            out, stderr = _broken(venv, program, relpath, text,
                                  *(["--no-import"] if at_start else []))
            name = os.path.basename(relpath)
            lines = stderr.splitlines()
            problems = []
            if at_start:
                if len(lines) != 1 or not lines[0].startswith("mpcompat: auto-activation "
                                                              "failed") or name not in lines[0]:
                    problems.append("not said at start-up in one line: %r" % stderr)
                if "error: TypeError" not in str(out["view"]):
                    problems.append("views pickle although mpcompat is off")
            else:
                # a call that raised (status() that answers may name the fault as well)
                steps = " ".join(str(out.get(k)) for k in ("explain", "per_process", "view",
                                                           "status")
                                 if str(out.get(k)).startswith("error: "))
                said = [where for where, text in (("stderr", stderr), ("a call", steps))
                        if name in text and ("SyntaxError" in text or "injected" in text)]
                if not said or stderr.count("MpcompatWarning") > 1 or \
                        (stderr and "MpcompatWarning" not in stderr):
                    problems.append("said by %s: stderr %r, steps %r" % (said, stderr, steps))
                if out["active"] is not True:
                    problems.append("mpcompat turned off")
            if problems:
                failures.append("%s (%s): %s" % (relpath, fault, "; ".join(problems)))
    assert failures == [], "\n".join(failures)


def test_a_broken_or_missing_bootstrap_costs_one_line(faulty):
    venv, program = faulty
    path = os.path.join(venv.site_packages, "_mpcompat_bootstrap.py")
    with open(path) as f:
        original = f.read()
    try:
        os.rename(path, path + ".moved")
        out, stderr = _run(venv, program, "--no-import")
        assert stderr == ("mpcompat: auto-activation failed, it stays off in this process and "
                          "its children (mpcompat.pth cannot import _mpcompat_bootstrap: "
                          "ModuleNotFoundError: No module named '_mpcompat_bootstrap'); "
                          "reinstall mpcompat to fix this\n")
        assert out["view"].startswith("error: TypeError: cannot pickle 'dict_keys' object")
        os.rename(path + ".moved", path)
        with open(path, "w") as f:
            f.write(original + "\ndef broken(:\n")
        out, stderr = _run(venv, program, "--no-import")
        assert len(stderr.splitlines()) == 1 and "_mpcompat_bootstrap" in stderr
        assert "SyntaxError" in stderr
    finally:
        if os.path.exists(path + ".moved"):
            os.rename(path + ".moved", path)
        with open(path, "w") as f:
            f.write(original)


def test_children_of_a_broken_process_stay_quiet(faulty):
    """The one line is said once per process tree: children skip auto-activation."""
    venv, program = faulty
    path = os.path.join(venv.site_packages, "mpcompat", "activation.py")
    with open(path) as f:
        original = f.read()
    child = "import sys; print('child', 'mpcompat' in sys.modules)"
    code = ("import pickle, subprocess, sys\n"
            "try:\n    pickle.dumps({}.keys())\nexcept TypeError:\n    print('parent off')\n"
            "sys.stdout.flush()\n"
            "subprocess.run([sys.executable, '-c', %r])\n" % child)
    try:
        with open(path, "w") as f:
            f.write(original + "\ndef broken(:\n")
        proc = venv.run(["python", "-c", code])
    finally:
        with open(path, "w") as f:
            f.write(original)
    assert proc.returncode == 0
    assert proc.stdout == "parent off\nchild False\n"
    assert len(proc.stderr.splitlines()) == 1 and "activation.py" in proc.stderr


def test_pip_wheel_builds_a_pure_python_wheel_without_a_compiler(repo, tmp_path):
    python = os.path.join(repo, ".venv", "bin", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPCOMPAT_")}
    env.update(CC="/bin/false", CXX="/bin/false")
    proc = subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path), repo], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
    assert proc.returncode == 0, proc.stdout
    built = os.listdir(str(tmp_path))
    assert len(built) == 1 and built[0].startswith("mpcompat-")
    assert built[0].endswith("-py3-none-any.whl")
