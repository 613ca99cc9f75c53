"""Benchmark the Pool hooks on the success path: a Pool with patch ``multiprocessing.pool_workers``
vs the same Pool with the patch disabled.

The patch wraps ``Pool._handle_workers`` (once per pool), ``Pool._maintain_pool`` (each time the
pool's worker-handler thread wakes up, which results arriving make it do) and the worker
function (once per worker process). Three child interpreters each keep a fork ``Pool(2)``: one
with mpcompat active, one with ``MPCOMPAT_DISABLED_PATCHES=multiprocessing.pool_workers`` and a
second of those as an A/A control (its ratio shows this machine's noise). They run the same
cases in interleaved rounds (order rotated each round) and report the time they measured;
the ratios are medians of the ratios within a round. Target: with/without <= 1.05.
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

from _common import Table, fmt_ms, median, verdict  # noqa: E402

PATCH = "multiprocessing.pool_workers"
TARGET = 1.05

# The child: one Pool, then one case per line read from stdin; prints the seconds it took.
_SERVER = r'''
import json, multiprocessing, sys, time
import mpcompat


def double(x):
    return 2 * x


def main():
    pool = multiprocessing.get_context("fork").Pool(2)
    state = {p.name: p.state for p in mpcompat.status().patches}[%(patch)r]
    pool.map(double, range(1000))
    print(json.dumps({"state": state}), flush=True)
    for line in sys.stdin:
        case, n = line.split()
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
    """A child interpreter that keeps a Pool and times cases on request."""

    def __init__(self, disabled):
        env = dict(os.environ)
        for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES"):
            env.pop(name, None)
        if disabled:
            env["MPCOMPAT_DISABLED_PATCHES"] = PATCH
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

    def time(self, case, n):
        self.proc.stdin.write("%s %d\n" % (case, n))
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
              "%.2f us" % (best["with"] * 1e6), "%.3f" % ratio,
              "%.3f" % (best["control"] / best["without"]), "<= 1.10 (a call)",
              verdict(ratio <= 1.10))


def _paired(a, b):
    """The median of the per-round ratios a[i] / b[i]."""
    return median([x / y for x, y in zip(a, b)])


def run(quick=False):
    """Time each case in the three children, interleaved; return a list of one Table."""
    rounds = 7 if quick else 21
    servers = {"with": _Server(False), "without": _Server(True), "control": _Server(True)}
    try:
        assert servers["with"].state == "applied", servers["with"].state
        assert servers["without"].state == servers["control"].state == "disabled"
        table = Table("Pool with patch %s vs without (fork Pool(2), success path)" % PATCH,
                      ["case", "without", "with", "ratio", "A/A control", "target", "result"])
        for label, case, n in CASES:
            if quick:
                n = max(n // 4, 100)
            names = list(servers)
            times = {name: [] for name in names}
            for round_no in range(rounds):
                shift = round_no % len(names)
                for name in names[shift:] + names[:shift]:
                    times[name].append(servers[name].time(case, n))
            best = {name: min(t) for name, t in times.items()}
            ratio = _paired(times["with"], times["without"])
            table.add(label, fmt_ms(best["without"]), fmt_ms(best["with"]), "%.3f" % ratio,
                      "%.3f" % _paired(times["control"], times["without"]),
                      "<= %.2f" % TARGET, verdict(ratio <= TARGET))
        _call_row(table, rounds)
        table.notes.append("%d interleaved rounds per case; times: the best round of each "
                           "child; ratios: the median over rounds of the ratio within a round "
                           "(a slow spell of this machine hits the children of one round "
                           "alike). The children's Pools are started once and warmed up"
                           % rounds)
        return [table]
    finally:
        for server in servers.values():
            server.close()


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    tables = run(quick="--quick" in (sys.argv[1:] if argv is None else argv))
    for table in tables:
        print(table)
    return 1 if any("FAIL" in row for t in tables for row in t.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
