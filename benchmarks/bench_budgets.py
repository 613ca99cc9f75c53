"""Pay on failure (issue 34): the instructions mpcompat adds to processes that never fail.

Instructions executed (valgrind's callgrind) in a venv with the wheel of this checkout against
a bare venv of the same Python.

Builds the wheel (``build --no-isolation``: needs ``build`` and ``hatchling``, as .venv has),
makes two venvs without pip from the running interpreter, one with the wheel installed, and
counts the instructions of each row in both (``PYTHONHASHSEED=0``, ``.pyc`` compiled by a run
first, one callgrind out-file per process). A row that measures a helper process (the resource
tracker, the forkserver, a spawn Pool worker) counts that process alone, start to exit, found
by the pid its program prints. Each row is measured once: two runs differ by under 1 k
instructions. Verdict: the added instructions against the row's target.

    .venv/bin/python benchmarks/bench_budgets.py           # the table; exit 1 if a target is missed
    .venv/bin/python benchmarks/bench_budgets.py --record  # write benchmarks/budgets.json
    .venv/bin/python benchmarks/bench_budgets.py --check   # exit 1 if a row grew over budgets.json

``--check`` fails when a row's added instructions exceed its recorded value by more than 10%
(and by at least 0.02 M, so that a row near zero does not fail on a few thousand instructions).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, print_tables, verdict  # noqa: E402
from bench_startup_installed import build_wheel, clean_env, make_venv  # noqa: E402

BUDGETS = os.path.join(HERE, "budgets.json")
GROWTH = 0.10  # --check: the most a row may grow over its recorded value
SLACK_M = 0.02  # ... and by at least this much (M instructions)

# The helper processes' programs; each prints the pid(s) of the process to measure.
_TRACKER = r'''
from multiprocessing import resource_tracker
resource_tracker.ensure_running()
print(resource_tracker._resource_tracker._pid)
'''
_FORKSERVER = r'''
import multiprocessing
from multiprocessing import forkserver


def task():
    pass


if __name__ == "__main__":
    multiprocessing.set_start_method("forkserver")
    process = multiprocessing.Process(target=task)
    process.start()
    process.join()
    print(forkserver._forkserver._forkserver_pid)
'''
_POOL = r'''
import multiprocessing


def task(x):
    return x


if __name__ == "__main__":
    pool = multiprocessing.get_context("spawn").Pool(1)
    pool.map(task, [0])
    print(" ".join(str(worker.pid) for worker in pool._pool))
    pool.close()
    pool.join()
'''

# key in budgets.json, label, command (after the python), extra environment, program of a
# helper process (None: the command's own process is measured), target (M instructions)
ROWS = [
    ("pass", "`python -c pass`", ["-c", "pass"], {}, None, 1.5),
    ("disabled", "`MPCOMPAT_DISABLE=1 python -c pass`", ["-c", "pass"],
     {"MPCOMPAT_DISABLE": "1"}, None, 0.2),
    ("import_re", '`python -c "import re"` (json, logging, argparse: copyreg)',
     ["-c", "import re"], {}, None, 1.5),
    ("import_pool", '`python -c "import multiprocessing.pool"`',
     ["-c", "import multiprocessing.pool"], {}, None, 3.0),
    ("resource_tracker", "the resource tracker, whole life", ["tracker.py"], {}, _TRACKER, 1.5),
    ("forkserver", "the forkserver's server process, whole life", ["forkserver.py"], {},
     _FORKSERVER, 1.5),
    ("spawn_worker", "a spawn `Pool(1)` worker, one `map`, whole life", ["pool.py"], {},
     _POOL, 4.0),
]


def instructions(python, args, env, work, helper):
    """Instructions executed by ``python args`` in ``work`` (callgrind); with ``helper``, by
    the processes whose pids the command prints, summed, instead of its own."""
    out = tempfile.mkdtemp(dir=work)
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/%%p" % out,
               "--trace-children=%s" % ("yes" if helper else "no"), python] + args
    # communicate() waits for every process holding stdout: helpers have ended (and written
    # their out-files) when it returns.
    proc = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    stdout, stderr = proc.communicate(timeout=600)
    if proc.returncode:
        raise RuntimeError("%s failed (exit %s):\n%s" % (" ".join(command), proc.returncode,
                                                         stderr[-3000:]))
    pids = [int(pid) for pid in stdout.split()] if helper else [proc.pid]
    total = 0
    for pid in pids:
        try:
            with open(os.path.join(out, str(pid))) as f:
                counts = [line.split()[1] for line in f if line.startswith(("summary:", "totals:"))]
        except OSError:
            raise RuntimeError("no callgrind out-file of pid %d from %s" % (pid, " ".join(command)))
        total += int(counts[-1])
    shutil.rmtree(out)
    return total


def measure():
    """Build the wheel and the two venvs; return ``{key: (bare, installed)}`` instructions."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed: bench_budgets counts instructions with "
                           "valgrind --tool=callgrind (Debian: apt-get install valgrind)")
    work = tempfile.mkdtemp(prefix="mpcompat-budgets-")
    try:
        wheel = build_wheel(os.path.join(work, "dist"))
        # Names of one length: a path's length changes the work of the interpreter's start.
        pythons = {"bare": make_venv(os.path.join(work, "bare")),
                   "inst": make_venv(os.path.join(work, "inst"), wheel)}
        env = clean_env(PYTHONHASHSEED="0")
        for name in ("PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONSTARTUP"):
            env.pop(name, None)
        for side, python in pythons.items():  # what is measured is what runs, on both sides
            loaded = subprocess.run([python, "-c", "import sys; print('_mpcompat_bootstrap' in "
                                     "sys.modules)"], env=env, cwd=work, stdout=subprocess.PIPE,
                                    universal_newlines=True, check=True).stdout.strip()
            if loaded != str(side == "inst"):
                raise RuntimeError("mpcompat's start-up %s in the %s venv" % (
                    "ran" if loaded == "True" else "did not run", side))
        results = {}
        for key, _, args, extra, program, _ in ROWS:
            if program:
                with open(os.path.join(work, args[0]), "w") as f:
                    f.write(program)
            counts = []
            for side in ("bare", "inst"):
                # one run without valgrind first: any .pyc missing is written, and a success
                # path that prints is no success path
                warm = subprocess.run([pythons[side]] + args, env=dict(env, **extra), cwd=work,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      universal_newlines=True)
                if warm.returncode or warm.stderr:
                    raise RuntimeError("%s venv, %s: exit %d, stderr:\n%s" % (
                        side, " ".join(args), warm.returncode, warm.stderr[-3000:]))
                counts.append(instructions(pythons[side], args, dict(env, **extra), work,
                                           program))
            results[key] = tuple(counts)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_budgets(path=BUDGETS):
    """The recorded budgets (``{}`` when none are)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def grown(added, recorded, growth=GROWTH, slack=SLACK_M):
    """Lines naming each row of ``added`` ({key: M}) that exceeds its ``recorded`` value
    ({key: M}) by more than ``growth`` (a fraction of it, at least ``slack`` M) or has none."""
    lines = []
    for key, value in added.items():
        if key not in recorded:
            lines.append("%s: +%.2f M, no recorded value (run --record)" % (key, value))
            continue
        limit = recorded[key] + max(growth * abs(recorded[key]), slack)
        if value > limit:
            lines.append("%s: %+.2f M added, recorded %+.2f M: over the limit %+.2f M (%d%%)"
                         % (key, value, recorded[key], limit, round(growth * 100)))
    return lines


def table_of(results, budgets):
    """The Table of ``results`` (from :func:`measure`) beside the recorded ``budgets``."""
    recorded = budgets.get("added_M", {})
    table = Table("Pay on failure: instructions mpcompat adds on the success path (callgrind, "
                  "Python %s)" % platform.python_version(),
                  ["case", "bare", "installed", "added", "target", "recorded", "result",
                   "growth vs recorded"])
    for key, label, _, _, _, target in ROWS:
        bare, inst = results[key]
        added, was = (inst - bare) / 1e6, recorded.get(key)
        table.add(label, "%.2f M" % (bare / 1e6), "%.2f M" % (inst / 1e6), "**%+.2f M**" % added,
                  "<= +%.1f M" % target, "—" if was is None else "%+.2f M" % was,
                  verdict(added <= target),
                  "—" if not was else "%+.1f%%" % (100.0 * (added - was) / abs(was)))
    table.notes.append("a venv with the wheel of this checkout against a bare venv of the same "
                       "Python; helper processes counted alone, start to exit")
    if budgets:
        table.notes.append("recorded on Python %s, %s (benchmarks/budgets.json)"
                           % (budgets.get("python"), budgets.get("date")))
    return table


def added_m(results):
    """``{key: added M instructions}`` of ``results``, rounded to 1 k."""
    return {key: round((inst - bare) / 1e6, 3) for key, (bare, inst) in results.items()}


def run(quick=False):
    """Measure every row; return a list of one Table (for benchmarks/run.py; callgrind's
    counts need no repetitions, so ``quick`` changes nothing)."""
    return [table_of(measure(), load_budgets())]


def main(argv=None):
    """Print the table; with --record write budgets.json, with --check compare with it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true",
                      help="write the added instructions to benchmarks/budgets.json")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a row grew more than 10%% over benchmarks/budgets.json")
    args = parser.parse_args(argv)
    budgets = load_budgets()
    version = "%d.%d" % sys.version_info[:2]
    if args.check and not budgets:
        return "no benchmarks/budgets.json: run bench_budgets.py --record first"
    if args.check and budgets["python"].rsplit(".", 1)[0] != version:
        return ("benchmarks/budgets.json was recorded on Python %s, this is %s: check with "
                "that Python or re-record" % (budgets["python"], platform.python_version()))
    try:
        results = measure()
    except RuntimeError as e:
        return "bench_budgets: %s" % e
    code = print_tables([table_of(results, budgets)])
    if args.record:
        with open(BUDGETS, "w") as f:
            json.dump({"python": platform.python_version(),
                       "date": datetime.date.today().isoformat(),
                       "added_M": added_m(results)}, f, indent=2)
            f.write("\n")
        print("\nrecorded in %s" % BUDGETS)
        return 0
    if args.check:
        lines = grown(added_m(results), budgets["added_M"])
        print("\n" + "\n".join(["grew more than %d%% over benchmarks/budgets.json:"
                                % round(GROWTH * 100)] + lines if lines else
                               ["no row grew more than %d%% over benchmarks/budgets.json"
                                % round(GROWTH * 100)]))
        return 1 if lines else 0
    return code


if __name__ == "__main__":
    sys.exit(main())
