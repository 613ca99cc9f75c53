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
    """Make sure the measured command really activates mpcompat (else the number is moot);
    return the path of the mpcompat it imported."""
    out = subprocess.run([python, "-c", code + "; import mpcompat; print(mpcompat.is_active(), "
                          "mpcompat.__file__)"],
                         env=env, stdout=subprocess.PIPE, universal_newlines=True)
    if not out.stdout.startswith("True "):
        raise RuntimeError("mpcompat is not active after %r with %s" % (code, python))
    return out.stdout.split(" ", 1)[1].strip()


def startup_row(table, label, python, env, runs, code="import mpcompat"):
    """Measure and add one row to ``table`` (see ``startup_table``)."""
    where = check_activates(python, env, code)
    if env.get("PYTHONPATH") == REPO and not where.startswith(os.path.join(REPO, "mpcompat")):
        raise RuntimeError("%s imported mpcompat from %s, not from this checkout" % (python, where))
    r = measure_startup(python, env, runs=runs, code=code)
    table.add(label, "%.1f ms" % r["base_ms"], "%.1f ms" % r["with_ms"],
              "**%+.2f ms**" % r["added_ms"], "%+.2f ms" % r["paired_ms"],
              "<= %.0f ms" % TARGET_MS, verdict(r["added_ms"] <= TARGET_MS))
    return r


def startup_table(title="Start-up: python -c \"import mpcompat\" vs python -c pass"):
    return Table(title, ["interpreter", "pass (median)", "import mpcompat (median)",
                         "added", "added (paired median)", "target", "result"])


def count_instructions(python, env, code, cwd=None):
    """Instructions executed by ``python -c code`` (valgrind's callgrind), or None.

    Unlike wall time this does not depend on what else the machine is doing; it shows how
    much work start-up does, not how long the loads from disk take.
    """
    import re
    import shutil
    if shutil.which("valgrind") is None:
        return None
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           python, "-c", code], env=dict(env, PYTHONHASHSEED="0"),
                          cwd=cwd or os.path.expanduser("~"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    return int(found.group(1)) if found and proc.returncode == 0 else None


def instructions_table():
    return Table("Start-up work: instructions executed (callgrind, independent of machine load)",
                 ["interpreter", "python -c pass", "import mpcompat", "added",
                  "added, as ms of the measured pass median"])


def instructions_row(table, label, python, env, pass_ms, code="import mpcompat"):
    base = count_instructions(python, env, "pass")
    with_ = count_instructions(python, env, code)
    if base is None or with_ is None:
        return None
    added = with_ - base
    table.add(label, "%.1f M" % (base / 1e6), "%.1f M" % (with_ / 1e6),
              "%+.1f M (%+.1f%%)" % (added / 1e6, 100.0 * added / base),
              "%.2f ms" % (pass_ms * added / base))
    return added


def run(quick=False):
    runs = 20 if quick else 40
    table = startup_table()
    work = instructions_table()
    env = repo_env()
    for venv, version in VENVS:
        python = os.path.join(REPO, venv, "bin", "python")
        if not os.path.exists(python):
            continue
        compile_package(python, env)
        label = "Python %s (%s, PYTHONPATH=repo)" % (version, venv)
        result = startup_row(table, label, python, env, runs)
        if not quick:
            instructions_row(work, label, python, env, result["base_ms"])
    table.notes.append("%d runs of each command per interpreter, alternating, after 3 warm-up "
                       "runs; mpcompat's .pyc compiled first" % runs)
    work.notes.append("the last column scales the added instructions by the wall time of "
                      "`python -c pass` measured above: an estimate of the added ms on an idle "
                      "machine, where the pass/import ratio holds")
    return [table] + ([work] if work.rows else [])


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
