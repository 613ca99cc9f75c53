"""Interpreter start-up: ``python -c "import mpcompat"`` against ``python -c pass``.

Both commands run alternately (ABBA order) in child interpreters, so that a noisy machine
slows both alike; the medians are compared. mpcompat's byte code is compiled first and the
child environment has no PYTHONDONTWRITEBYTECODE, as in a normal installation. Target: at
most 3 ms added.

``measure_startup(python, env, ...)`` takes the interpreter and its environment, so other
set-ups (an installed wheel whose .pth activates mpcompat at start-up) can reuse it.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, median, verdict  # noqa: E402

TARGET_MS = 3.0
VENVS = [(".venv38", "3.8"), (".venv", "3.11"), (".venv313", "3.13")]


def repo_env(extra_path=None):
    """os.environ for a child that imports mpcompat from this checkout (and nothing else of
    ours): PYTHONPATH=repo, no PYTHONDONTWRITEBYTECODE, no MPCOMPAT_* variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MPCOMPAT_") and k not in ("PYTHONDONTWRITEBYTECODE",
                                                          "PYTHONPATH")}
    env["PYTHONPATH"] = REPO if extra_path is None else os.pathsep.join([REPO, extra_path])
    return env


def compile_package(python, env, path=os.path.join(REPO, "mpcompat")):
    """Write mpcompat's .pyc files for ``python`` (as an installation would)."""
    subprocess.run([python, "-m", "compileall", "-q", path], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def _time_once(argv, env, cwd):
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError("%s failed: %s" % (argv, proc.stderr.decode(errors="replace")))
    return elapsed


def measure_startup(python, env, runs=30, warmup=3, code="import mpcompat", baseline="pass",
                    cwd=None):
    """Time ``python -c code`` against ``python -c baseline``, ``runs`` times each, alternating.

    Returns a dict: ``base`` and ``with`` (lists of seconds), their medians ``base_ms`` and
    ``with_ms``, ``added_ms`` (difference of the medians) and ``paired_ms`` (median of the
    differences within each ABBA pair).
    """
    cwd = cwd or os.path.expanduser("~")
    base_argv, with_argv = [python, "-c", baseline], [python, "-c", code]
    for _ in range(warmup):
        _time_once(base_argv, env, cwd)
        _time_once(with_argv, env, cwd)
    base, with_ = [], []
    for i in range(runs):
        if i % 2 == 0:
            base.append(_time_once(base_argv, env, cwd))
            with_.append(_time_once(with_argv, env, cwd))
        else:
            with_.append(_time_once(with_argv, env, cwd))
            base.append(_time_once(base_argv, env, cwd))
    base_ms, with_ms = median(base) * 1000, median(with_) * 1000
    return {"base": base, "with": with_, "base_ms": base_ms, "with_ms": with_ms,
            "added_ms": with_ms - base_ms,
            "paired_ms": median([w - b for w, b in zip(with_, base)]) * 1000}


def check_activates(python, env, code="import mpcompat"):
    """Make sure the measured command really activates mpcompat (else the number is moot)."""
    out = subprocess.run([python, "-c", code + "; import mpcompat; print(mpcompat.is_active())"],
                         env=env, stdout=subprocess.PIPE, universal_newlines=True)
    if out.stdout.strip() != "True":
        raise RuntimeError("mpcompat is not active after %r with %s" % (code, python))


def startup_row(table, label, python, env, runs, code="import mpcompat"):
    """Measure and add one row to ``table`` (see ``startup_table``)."""
    check_activates(python, env, code)
    r = measure_startup(python, env, runs=runs, code=code)
    table.add(label, "%.1f ms" % r["base_ms"], "%.1f ms" % r["with_ms"],
              "**%+.2f ms**" % r["added_ms"], "%+.2f ms" % r["paired_ms"],
              "<= %.0f ms" % TARGET_MS, verdict(r["added_ms"] <= TARGET_MS))
    return r


def startup_table(title="Start-up: python -c \"import mpcompat\" vs python -c pass"):
    return Table(title, ["interpreter", "pass (median)", "import mpcompat (median)",
                         "added", "added (paired median)", "target", "result"])


def run(quick=False):
    runs = 20 if quick else 40
    table = startup_table()
    env = repo_env()
    for venv, version in VENVS:
        python = os.path.join(REPO, venv, "bin", "python")
        if not os.path.exists(python):
            continue
        compile_package(python, env)
        startup_row(table, "Python %s (%s, PYTHONPATH=repo)" % (version, venv), python, env,
                    runs)
    table.notes.append("%d runs of each command per interpreter, alternating, after 3 warm-up "
                       "runs; mpcompat's .pyc compiled first" % runs)
    return [table]


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
