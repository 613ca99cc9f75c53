"""Helpers for tests that run child interpreters; ``from testenv import run_python``.

(Also re-exported by tests/conftest.py, but import them from here: a conftest.py in a
subdirectory replaces ``sys.modules["conftest"]`` once pytest collects it.)
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")


def child_env(**overrides):
    """The environment for a child interpreter: mpcompat importable from this checkout.

    ``MPCOMPAT_DISABLE`` and ``MPCOMPAT_DISABLED_PATCHES`` from the outer environment are
    dropped; pass them in ``overrides`` (a value of None removes a variable).
    """
    env = dict(os.environ)
    for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([REPO, TESTS])
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_python(code, *args, python=None, env=None, timeout=300, cwd=None):
    """Run ``python -c code *args`` in a fresh interpreter; return the CompletedProcess.

    stdout and stderr are captured as text; the exit code is not checked.
    """
    return subprocess.run([python or sys.executable, "-c", code] + list(args),
                          env=env if env is not None else child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, cwd=cwd or REPO)


def race(threads):
    """Start ``threads`` with the interpreter switching between them as often as it can, and
    wait for them all (the switch interval is restored afterwards)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)


_RACE_STEPS = """
import sys, threading
from testenv import race
errors = []
def looping(step, n=300):
    def run():
        for i in range(n):
            try:
                step(i)
            except Exception as exc:
                errors.append(repr(exc))
    return run
def each(steps):
    race([threading.Thread(target=looping(step)) for step in steps])
    assert errors == [], errors[:3]
"""


def run_race(code, python=None):
    """Run ``code`` in a fresh interpreter, bounded by a timeout, after a prelude defining
    ``each(steps)``: it runs each ``step(i)`` 300 times in a thread of its own, all at once
    (:func:`race`), and asserts that none raised. ``code`` prints "ok" as it ends."""
    result = run_python(_RACE_STEPS + code, python=python, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok"), result.stdout + result.stderr


# What CPython says when a child cannot find a name in the main script: "Can't get attribute 'X'
# on <module '__mp_main__' from '/path'>" up to 3.13, "module '__mp_main__' has no attribute
# 'X'" from 3.14 on.
NEW_PICKLE_MESSAGES = sys.version_info >= (3, 14)


def missing_in_main(name, module="__mp_main__", path=None):
    """The ``AttributeError`` text (after "AttributeError: ") for ``name`` missing from the
    child's main module; with ``path`` None, the prefix that holds on every Python."""
    if NEW_PICKLE_MESSAGES:
        return "module %r has no attribute %r" % (module, name)
    if path is None:
        return "Can't get attribute %r on <module %r" % (name, module)
    return "Can't get attribute %r on <module %r from %r>" % (name, module, path)


# A local function or lambda: AttributeError("Can't pickle local object ...") up to 3.13,
# PicklingError from 3.14 on.
if NEW_PICKLE_MESSAGES:
    import pickle as _pickle
    LOCAL_OBJECT_ERROR = _pickle.PicklingError
else:
    LOCAL_OBJECT_ERROR = AttributeError
