"""A broken install, whatever part of it is broken and whenever that part loads: one line on
stderr naming the file, mpcompat off (``is_active()`` False), ``status()`` still answers and
says why, and the program runs to its end.

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
import json, pickle, sys
out = {}
def step(name, fn):
    try:
        out[name] = fn()
    except BaseException as exc:
        out[name] = "error: %s: %s" % (type(exc).__name__, exc)
step("view", lambda: list(pickle.loads(pickle.dumps({"a": 1}.keys()))))
import multiprocessing.reduction, multiprocessing.spawn, multiprocessing.pool
import concurrent.futures.process
if "--no-import" not in sys.argv:
    import mpcompat
    step("explain", lambda: mpcompat.explain(lambda: 0).ok)
    step("per_process", lambda: mpcompat.per_process(dict, a=1)["a"])
    step("status", lambda: str(mpcompat.status()).splitlines()[0])
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
    out, stderr = _run(venv, program)
    assert stderr == "" and out["active"] is True and out["view"] == ["a"], (out, stderr)
    files = []
    for name in out["modules"]:
        if name == "_mpcompat_bootstrap":
            continue
        parts = name.split(".")
        base = os.path.join(venv.site_packages, *parts)
        path = os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"
        assert os.path.isfile(path), path
        files.append(os.path.relpath(path, venv.site_packages))
    return files


def test_every_loaded_file_broken_in_turn_costs_one_line_and_turns_mpcompat_off(faulty):
    venv, program = faulty
    files = _loaded_files(venv, program)
    assert "mpcompat/pickling/registry.py" in files and "mpcompat/patching/manager.py" in files
    assert "mpcompat/diagnose/walker.py" in files and "mpcompat/pickling/per_process.py" in files
    failures = []
    for relpath in files:
        path = os.path.join(venv.site_packages, relpath)
        with open(path) as f:
            original = f.read()
        for fault, text in FAULTS.items():
            try:
                with open(path, "w") as f:
                    f.write(original + text)
                package_init = relpath == os.path.join("mpcompat", "__init__.py")
                out, stderr = _run(venv, program, *(["--no-import"] if package_init else []))
            finally:
                with open(path, "w") as f:
                    f.write(original)
            problems = []
            lines = stderr.splitlines()
            if len(lines) != 1 or not lines[0].startswith("mpcompat: ") \
                    or os.path.basename(relpath) not in lines[0]:
                problems.append("stderr %r" % stderr)
            if not package_init:
                if out["active"] is not False:
                    problems.append("still active")
                if "inactive" not in str(out["status"]) \
                        or os.path.basename(relpath) not in str(out["status"]):
                    problems.append("status %r" % out["status"])
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
    path = os.path.join(venv.site_packages, "mpcompat", "pickling", "registry.py")
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
    assert len(proc.stderr.splitlines()) == 1 and "registry.py" in proc.stderr


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
