"""Benchmark the Pool hooks on the success path: a Pool with patch ``multiprocessing.pool_workers``
vs the same Pool with the patch disabled.

The patch wraps ``Pool._handle_workers`` (once per pool), ``Pool._maintain_pool`` (each time the
pool's worker-handler thread wakes up, which results arriving make it do) and the worker
function (once per worker process). One child interpreter keeps a fork ``Pool(2)`` and times
the cases in three modes, in interleaved rounds (order rotated each round): "with" (the patch
applied), "without" (``mpcompat.activate(disabled_patches=[...])``: the originals back) and
"control", a second "without" (its ratio shows this machine's noise). One child for all
modes: separate children differed by where the scheduler put them, by up to 20% on this
shared 2-core machine. The ratio of the best rounds is reported with the median of the ratios
within a round. The verdict compares "with" against the slower of the two unpatched modes: at
most 1.05x of it (the patch adds no per-task work; the per-call cost of what it adds is the
last row).
Run: ``python benchmarks/bench_pool_hooks.py [--quick]`` or ``benchmarks/run.py pool_hooks``.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import print_tables, Table, fmt_ms, median, verdict  # noqa: E402

PATCH = "multiprocessing.pool_workers"
TARGET = 1.05

# The child: one Pool, then one case per line read from stdin; prints the seconds it took.
_SERVER = r'''
import json, multiprocessing, sys, time
import mpcompat


def double(x):
    return 2 * x


def switch(mode):
    """with: the patch applied; without and control: the patch disabled (originals back)."""
    mpcompat.activate(disabled_patches=[] if mode == "with" else [%(patch)r])
    state = {p.name: p.state for p in mpcompat.status().patches}[%(patch)r]
    if state != ("applied" if mode == "with" else "disabled"):
        raise RuntimeError("mode %%s: patch %%s" %% (mode, state))


def main():
    pool = multiprocessing.get_context("fork").Pool(2)
    pool.map(double, range(1000))
    mode = None
    print(json.dumps({"state": "ready"}), flush=True)
    for line in sys.stdin:
        wanted, case, n = line.split()
        if wanted != mode:
            mode = wanted
            switch(mode)
        n = int(n)
        start = time.perf_counter()
        if case == "map":
            pool.map(double, range(n))
        elif case == "map1":
            pool.map(double, range(n), chunksize=1)
        elif case == "apply":
            for i in range(n):
                pool.apply(double, (i,))
        elif case == "async":
            for result in [pool.apply_async(double, (i,)) for i in range(n)]:
                result.get()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    pool.terminate()
    pool.join()


if __name__ == "__main__":
    main()
''' % {"patch": PATCH}

CASES = [
    ("Pool.map, 200000 items (default chunks)", "map", 200000),
    ("Pool.map, 5000 items, chunksize=1", "map1", 5000),
    ("Pool.apply round trips, 500 in a row", "apply", 500),
    ("apply_async, 2000 pending then get()", "async", 2000),
]


class _Server(object):
    """A child interpreter that keeps one Pool and times cases on request, switching the patch
    on and off in place (one process: the scheduler's placement of it and its workers is the
    same for both modes)."""

    def __init__(self):
        env = dict(os.environ)
        for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES"):
            env.pop(name, None)
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], env=env, cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     universal_newlines=True)
        self.state = self._read()["state"]

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the benchmark child exited (code %s)" % self.proc.wait())
        return json.loads(line)

    def time(self, mode, case, n):
        self.proc.stdin.write("%s %s %d\n" % (mode, case, n))
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def _call_row(table, rounds):
    """One call of the wrapped Pool._maintain_pool (a watched pool, no worker exited) vs the
    original, in this process: what the worker-handler thread pays per wake-up."""
    import multiprocessing
    import multiprocessing.pool as pool_module
    import mpcompat
    from _common import interleaved
    from mpcompat.patches import mp_pool_workers as patch
    mpcompat.activate()
    Pool = pool_module.Pool
    hooked = Pool.__dict__["_maintain_pool"].__func__
    assert getattr(hooked, "_mpcompat_pool_workers", False), "patch not applied"
    original = hooked._mpcompat_original.__func__
    pool = multiprocessing.get_context("fork").Pool(2)
    try:
        args = (pool._ctx, pool.Process, pool._processes, pool._pool, pool._inqueue,
                pool._outqueue, pool._initializer, pool._initargs, pool._maxtasksperchild,
                pool._wrap_exception)
        patch._local.watch = patch._Watch(Pool, pool._cache, pool._pool)
        loops = 5000

        def loop(func):
            def run_loop():
                for _ in range(loops):
                    func(*args)
            return run_loop
        times = interleaved({"without": loop(original), "with": loop(hooked),
                             "control": loop(original)}, rounds)
    finally:
        patch._local.watch = None
        pool.terminate()
        pool.join()
    best = {name: min(t) / loops for name, t in times.items()}
    ratio = best["with"] / best["without"]
    table.add("Pool._maintain_pool, one call (per wake-up)", "%.2f us" % (best["without"] * 1e6),
              "%.2f us" % (best["with"] * 1e6), "%.3f" % ratio, "-",
              "%.3f" % (best["control"] / best["without"]), "-", "<= 1.10 (a call)",
              verdict(ratio <= 1.10))


def _paired(a, b):
    """The median of the per-round ratios a[i] / b[i]."""
    return median([x / y for x, y in zip(a, b)])


def run(quick=False):
    """Time each case in the three modes of one child, interleaved; return a list of one
    Table."""
    rounds = 9 if quick else 41
    server = _Server()
    try:
        table = Table("Pool with patch %s vs without (fork Pool(2), success path)" % PATCH,
                      ["case", "without", "with", "ratio (best)", "ratio (paired median)",
                       "A/A control (best)", "with / slower unpatched", "target", "result"])
        for label, case, n in CASES:
            if quick:
                n = max(n // 4, 100)
            names = ["with", "without", "control"]
            times = {name: [] for name in names}
            for round_no in range(rounds):
                shift = round_no % len(names)
                for name in names[shift:] + names[:shift]:
                    times[name].append(server.time(name, case, n))
            best = {name: min(t) for name, t in times.items()}
            ratio = best["with"] / best["without"]
            baseline = max(best["without"], best["control"])
            table.add(label, fmt_ms(best["without"]), fmt_ms(best["with"]), "%.3f" % ratio,
                      "%.3f" % _paired(times["with"], times["without"]),
                      "%.3f" % (best["control"] / best["without"]),
                      "%.3f" % (best["with"] / baseline), "<= %.2f" % TARGET,
                      verdict(best["with"] / baseline <= TARGET))
        _call_row(table, rounds)
        table.notes.append("%d interleaved rounds per case in one child, its Pool started once "
                           "and warmed up, the patch switched on (with) and off (without, "
                           "control) in place; times: the best round of each mode; paired "
                           "median: the median over rounds of the ratio within a round; "
                           "verdict: 'with' against the slower of the two unpatched modes"
                           % rounds)
        return [table]
    finally:
        server.close()


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
