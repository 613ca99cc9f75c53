"""Pool start-up with mpcompat against without: ``with Pool(n) as p: p.map(f, range(n))``, end
to end, for ``Pool(2)`` and ``Pool(200)`` under fork, spawn and forkserver.

Two virtualenvs are made from the interpreter that runs this file: one with mpcompat as its
wheel installs it (``mpcompat.pth``, ``_mpcompat_bootstrap.py`` and the package, linked from
this checkout, at the root of site-packages: active in every worker from its start), one
without. Each measurement is a fresh interpreter of one of them that times a first Pool, from
``Pool(n)`` to the end of the ``with`` block (every worker ended). The import of
``multiprocessing.pool`` just before is timed on its own and shown beside it (not judged here:
the import callbacks have their own target, in bench_import_callbacks); the Pool patch loads at
the first ``Pool()``, inside the judged time.
Each round runs "with", "without" and "control" (a second "without": its difference shows this
machine's noise) in an order rotated by one per round. Judged: fork ``Pool(2)``, the median of
"with" minus the slower of the medians of "without" and "control": at most +1 ms. The other
cases are shown (added ms and ratio), not judged; so is fork ``Pool(2)``'s second Pool in the
process (a first one made and ended before it): what a later Pool pays, the patches applied and
their modules loaded. The CPU column adds up the CPU time of the parent and of the workers
(and the forkserver, with the workers it reaped).

Run: ``python benchmarks/bench_pool_startup.py [--quick] [--fork2]`` with the interpreter to measure
(``benchmarks/run.py pool_startup`` for .venv's); Python 3.14 in the Debian sid chroot:
``bash .ci/sid run 3.14 python benchmarks/bench_pool_startup.py``.
"""
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, fmt_ms, median, print_tables, verdict  # noqa: E402

TARGET_MS = 1.0  # fork Pool(2): added milliseconds at most
JUDGED = ("fork", 2)
CASES = [(method, n) for n in (2, 200) for method in ("fork", "spawn", "forkserver")]
MODES = ("with", "without", "control")

# The measured program. It prints: whether mpcompat is active, the wall seconds of the import of
# multiprocessing.pool and of the Pool, the CPU seconds of all its processes during the Pool.
_PROGRAM = r'''
import os
import resource
import sys
import time
import multiprocessing


def task(x):
    return x


def reaped_cpu():
    """CPU seconds of this process and of the children it reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def forkserver_cpu():
    """CPU seconds of the forkserver and of the workers it reaped (/proc/PID/stat)."""
    from multiprocessing import forkserver
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    try:
        with open("/proc/%d/stat" % pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return sum(int(f) for f in fields[11:15]) / float(os.sysconf("SC_CLK_TCK"))


if __name__ == "__main__":
    method, n = sys.argv[1], int(sys.argv[2])
    context = multiprocessing.get_context(method)
    before = time.perf_counter()
    import multiprocessing.pool  # noqa: F401 (the Pool patch applies here)
    imported = time.perf_counter() - before
    if sys.argv[3:] == ["second"]:  # what a later Pool pays: a first one made and ended before
        with context.Pool(n) as pool:
            pool.map(task, range(n))
        pool.join()
    cpu, start = reaped_cpu(), time.perf_counter()
    with context.Pool(n) as pool:
        pool.map(task, range(n))
    pool.join()
    wall = time.perf_counter() - start
    cpu = reaped_cpu() - cpu + (forkserver_cpu() if method == "forkserver" else 0.0)
    active = "mpcompat" in sys.modules and sys.modules["mpcompat"].is_active()
    print(int(active), imported, wall, cpu)
'''


def make_venv(root, with_mpcompat):
    """A venv without pip at ``root`` made from this interpreter; with mpcompat laid out as its
    wheel installs it, the package linked from this checkout. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root], check=True)
    python = os.path.join(root, "bin", "python")
    if with_mpcompat:
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path("
                               "'purelib'))"], stdout=subprocess.PIPE, universal_newlines=True,
                              check=True).stdout.strip()
        startup = os.path.join(REPO, "mpcompat", "_startup")
        for name in ("mpcompat.pth", "mpcompat.start", "_mpcompat_bootstrap.py"):
            shutil.copy(os.path.join(startup, name), site)
        os.symlink(os.path.join(REPO, "mpcompat"), os.path.join(site, "mpcompat"))
        # .pyc files as an installation writes them
        subprocess.run([python, "-m", "compileall", "-q", site], check=True,
                       stdout=subprocess.DEVNULL)
    return python


def child_env():
    """os.environ without what would change either side: MPCOMPAT_*, PYTHONPATH, PYTHONHOME,
    PYTHONDONTWRITEBYTECODE, PYTHONSTARTUP."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MPCOMPAT_") and k not in (
        "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONSTARTUP")}


def measure(python, program, method, n, env, cwd, second=False):
    """One run of ``program``: ``(active, (wall seconds, CPU seconds, import seconds))``; with
    ``second``, of the second Pool in the process."""
    proc = subprocess.run([python, program, method, str(n)] + ["second"] * second, env=env,
                          cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("%s %s Pool(%d) failed:\n%s" % (python, method, n, proc.stderr))
    active, imported, wall, cpu = proc.stdout.split()
    return active == "1", (float(wall), float(cpu), float(imported))


def run_case(pythons, program, method, n, rounds, env, cwd, second=False):
    """``{mode: [(wall, cpu, import), ...]}`` over ``rounds`` rounds, the order of the modes rotated by
    one per round, after one warm-up run of each (``second``: the second Pool of each run)."""
    times = {mode: [] for mode in MODES}
    for round_no in range(-1, rounds):
        shift = max(round_no, 0) % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            active, times_of_run = measure(pythons[mode], program, method, n, env, cwd, second)
            if active != (mode == "with"):
                raise RuntimeError("mpcompat is %s in the %r run" % (
                    "active" if active else "not active", mode))
            if round_no >= 0:
                times[mode].append(times_of_run)
    return times


def worker_instructions(python, program, env, cwd):
    """Instructions one spawn Pool worker executes, interpreter start to exit (valgrind's
    callgrind, independent of machine load), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    out = tempfile.mkdtemp(dir=cwd)
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                    "--callgrind-out-file=%s/%%p.out" % out, python, program, "spawn", "1"],
                   env=dict(env, PYTHONHASHSEED="0"), cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=600, check=True)
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            text = f.read()
        if "spawn_main" in text.partition("\ncmd:")[2].partition("\n")[0]:
            for line in text.splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    return None


def instructions_table(pythons, program, env, cwd):
    """The Table of :func:`worker_instructions` with and without mpcompat, or None."""
    counts = {mode: worker_instructions(pythons[mode], program, env, cwd)
              for mode in ("with", "without")}
    if None in counts.values():
        return None
    table = Table("One spawn Pool worker, interpreter start to exit: instructions executed "
                  "(callgrind)", ["without", "with", "added", "ratio"])
    table.add("%.1f M" % (counts["without"] / 1e6), "%.1f M" % (counts["with"] / 1e6),
              "%+.1f M" % ((counts["with"] - counts["without"]) / 1e6),
              "%.3f" % (counts["with"] / counts["without"]))
    table.notes.append("spawn Pool(1) running one task; independent of the machine's load, "
                       "what the wall times above spread over the workers")
    return table


def run(quick=False, judged_only=False):
    """Time every case (``judged_only``: fork Pool(2) alone); return a list of Tables."""
    rounds = {2: 7 if quick else 31, 200: 2 if quick else 5}
    methods = set(multiprocessing.get_all_start_methods())
    label = "Python %s" % platform.python_version()
    table = Table("Pool start-up with mpcompat vs without (%s)" % label,
                  ["case", "import without / with", "without", "with", "added (medians)",
                   "A/A control", "ratio (medians)", "ratio (paired median)",
                   "CPU ratio (medians)", "target", "result"])
    root = tempfile.mkdtemp(prefix="mpcompat-pool-startup-")
    work = None
    try:
        pythons = {"with": make_venv(os.path.join(root, "with"), True)}
        pythons["without"] = pythons["control"] = make_venv(os.path.join(root, "without"),
                                                             False)
        program = os.path.join(root, "pool_startup.py")
        with open(program, "w") as f:
            f.write(_PROGRAM)
        env = child_env()
        # (fork Pool(2) again, its second Pool in the process: what a later Pool pays, shown)
        for method, n, second in [case + (False,) for case in CASES] + [JUDGED + (True,)]:
            if method not in methods or (judged_only and (method, n) != JUDGED) or (
                    second and quick and not judged_only):
                continue
            times = run_case(pythons, program, method, n, rounds[n], env, root, second)
            wall = {mode: median([t[0] for t in times[mode]]) for mode in MODES}
            cpu = {mode: median([t[1] for t in times[mode]]) for mode in MODES}
            imported = {mode: median([t[2] for t in times[mode]]) for mode in MODES}
            paired = median([w[0] / wo[0] for w, wo in zip(times["with"], times["without"])])
            added = wall["with"] - max(wall["without"], wall["control"])
            judged = (method, n) == JUDGED and not second
            table.add("%s Pool(%d)%s" % (method, n, ", the second" if second else ""), "%s / %s" % (
                fmt_ms(imported["without"]), fmt_ms(imported["with"])), fmt_ms(wall["without"]),
                      fmt_ms(wall["with"]), "%+.2f ms" % (added * 1000),
                      "%+.2f ms" % ((wall["control"] - wall["without"]) * 1000),
                      "%.3f" % (wall["with"] / wall["without"]), "%.3f" % paired,
                      "%.3f" % (cpu["with"] / max(cpu["without"], 1e-9)),
                      "<= +%.1f ms" % TARGET_MS if judged else "(shown)",
                      verdict(added * 1000 <= TARGET_MS) if judged else "")
        if not quick and not judged_only and "spawn" in methods:
            work = instructions_table(pythons, program, env, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table.notes.append(
        "%s (%s), %d CPUs; %d rounds for Pool(2), %d for Pool(200), each a fresh interpreter "
        "per mode, after one warm-up run of each; times: medians of the wall time from before "
        "Pool(n) to the end of its with block (the import of multiprocessing.pool just before: "
        "its own column); added: with minus the slower of without and control; A/A control: "
        "control minus without; paired median: the median over rounds of with / without in "
        "the same round; judged: fork Pool(2), at most +%.1f ms" % (
            label, sysconfig.get_platform(), os.cpu_count() or 0, rounds[2], rounds[200],
            TARGET_MS))
    return [table] + ([work] if work is not None else [])


def main(argv=None):
    """Print the table (``--fork2``: the judged case alone); return 0 when every target is
    met."""
    argv = sys.argv[1:] if argv is None else argv
    return print_tables(run(quick="--quick" in argv, judged_only="--fork2" in argv))


if __name__ == "__main__":
    sys.exit(main())
