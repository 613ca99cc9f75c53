"""Interpreter start-up with the installed wheel's mpcompat.pth, against the same venv without
mpcompat.

Builds the wheel from this checkout, makes two venvs from the running interpreter (one with the
wheel installed by pip, one without), and times ``python -c pass`` in each, interleaved, plus
the installed venv with ``MPCOMPAT_DISABLE=1``. Prints a markdown table of medians; the target
is at most 3 ms added. Run: ``.venv/bin/python benchmarks/bench_startup_installed.py [-n RUNS]``
(needs ``build`` and ``hatchling``, as .venv has).
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_MS = 3.0


def build_wheel(out):
    """Build the wheel of this checkout into ``out``; return its path."""
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                           out, REPO], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode:
        sys.exit("building the wheel failed:\n" + proc.stdout)
    return glob.glob(os.path.join(out, "mpcompat-*.whl"))[0]


def make_venv(root, wheel=None):
    """Make a venv without pip at ``root``, with ``wheel`` installed by this interpreter's pip;
    return its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root], check=True)
    python = os.path.join(root, "bin", "python")
    if wheel:
        subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                        "--disable-pip-version-check", "--no-deps", "--no-index", wheel],
                       check=True)
    return python


def clean_env(**extra):
    """The environment without PYTHONPATH and MPCOMPAT_* variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("MPCOMPAT_")}
    env.update(extra)
    return env


def start_time(python, env):
    """(wall seconds, CPU seconds) of one ``python -c pass``, start to exit.

    CPU time (user + system, from wait4) hardly moves when other work loads the machine; wall
    time is what a user waits for.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-c", "pass"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if proc.returncode:
        sys.exit("%s -c pass failed" % python)
    return wall, usage.ru_utime + usage.ru_stime


def import_cost_ms(python, runs=10):
    """Median cumulative ``-X importtime`` of ``mpcompat`` at start-up, in ms."""
    costs = []
    for _ in range(runs):
        err = subprocess.run([python, "-X", "importtime", "-c", "pass"], env=clean_env(),
                             stderr=subprocess.PIPE, universal_newlines=True, check=True).stderr
        match = re.search(r"^import time:\s+\d+ \|\s+(\d+) \|\s+mpcompat$", err, re.M)
        costs.append(int(match.group(1)) / 1000.0)
    return statistics.median(costs)


def main(argv=None):
    """Run the benchmark and print its markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs per case (>= 20)")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="mpcompat-bench-startup-")
    try:
        wheel = build_wheel(os.path.join(work, "dist"))
        with_pth = make_venv(os.path.join(work, "installed"), wheel)
        without = make_venv(os.path.join(work, "bare"))
        cases = [("venv without mpcompat", without, clean_env()),
                 ("venv with the wheel: mpcompat.pth activates mpcompat", with_pth, clean_env()),
                 ("venv with the wheel, MPCOMPAT_DISABLE=1", with_pth,
                  clean_env(MPCOMPAT_DISABLE="1"))]
        times = [[] for _ in cases]
        for _, python, env in cases:  # warm the file cache
            start_time(python, env)
        for i in range(args.runs):
            # Interleaved, in a rotating order, so that drift hits every case alike.
            for k in range(len(cases)):
                j = (i + k) % len(cases)
                times[j].append(start_time(cases[j][1], cases[j][2]))
        wall = [statistics.median(w for w, _ in t) * 1000.0 for t in times]
        cpu = [statistics.median(c for _, c in t) * 1000.0 for t in times]
        cost = import_cost_ms(with_pth)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("Interpreter start (`python -c pass`), Python %s, median of %d interleaved runs each; "
          "target: at most %.0f ms added.\n" % (sys.version.split()[0], args.runs, TARGET_MS))
    print("| case | wall ms | added | CPU ms | added |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k, (name, _, _) in enumerate(cases):
        added = ["—", "—"] if k == 0 else ["%+.1f" % (wall[k] - wall[0]),
                                          "%+.1f" % (cpu[k] - cpu[0])]
        print("| %s | %.1f | %s | %.1f | %s |" % (name, wall[k], added[0], cpu[k], added[1]))
    print("\n`-X importtime` of `mpcompat` at start-up (cumulative, median of 10): %.1f ms" % cost)


if __name__ == "__main__":
    main()
