"""Benchmark the Pool patch on the success path: what its workers spend per tiny task. A fork
``Pool(2)`` with patch ``multiprocessing.pool_workers`` (a channel per worker, the parent
dispatches each task and reads each result from the worker's channel) vs the standard
library's Pool, mpcompat off (every patch disabled, the originals back).

The job: ``pool.map(f, range(20000), chunksize=1)``, then 5,000 ``apply_async`` pending and
their ``get()``. Judged: the CPU time of the two workers during the job (``/proc/PID/schedstat``:
nanoseconds on a CPU), at most 1.10x stock. Shown beside it: the wall time and the parent's CPU
time (its handler threads).

One child interpreter times the modes in interleaved rounds (order rotated each round): "with"
(every patch applied), "without" (``mpcompat.activate(disabled_patches="*")``) and "control", a
second "without" (its ratio shows this machine's noise). Each measurement starts a fresh fork
``Pool(2)`` in that mode, warms it up, and measures only the job. Reported: medians over the
rounds, and the median of the ratios within a round; the verdict compares "with" against the
slower of the two unpatched modes.
Run: ``python benchmarks/bench_pool_hooks.py [--quick]`` or ``benchmarks/run.py pool_hooks``.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import ServerChild, Table, fmt_ms, median, print_tables, verdict  # noqa: E402

TARGET = 1.10
MODES = ("with", "without", "control")

# The child: one job per line read from stdin ("mode tasks asyncs"); prints what it measured.
_SERVER = r'''
import json, multiprocessing, multiprocessing.pool, sys, time
import mpcompat


def double(x):
    return 2 * x


def on_cpu(pid):
    with open("/proc/%d/schedstat" % pid) as f:
        return int(f.read().split()[0]) / 1e9


def main():
    print(json.dumps({"state": "ready"}), flush=True)
    for line in sys.stdin:
        mode, tasks, asyncs = line.split()
        mpcompat.activate(disabled_patches=[] if mode == "with" else "*")
        pool = multiprocessing.get_context("fork").Pool(2)
        pool.map(double, range(200), chunksize=1)
        workers = [p.pid for p in pool._pool]
        before = [on_cpu(pid) for pid in workers]
        cpu, start = time.process_time(), time.perf_counter()
        pool.map(double, range(int(tasks)), chunksize=1)
        for result in [pool.apply_async(double, (i,)) for i in range(int(asyncs))]:
            result.get()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = [on_cpu(pid) for pid in workers]
        if [p.pid for p in pool._pool] != workers:
            raise RuntimeError("a worker was replaced during the job")
        print(json.dumps({"workers": sum(after) - sum(before), "wall": wall, "parent": cpu}),
              flush=True)
        pool.terminate()
        pool.join()


if __name__ == "__main__":
    main()
'''


def run(quick=False):
    """Measure the job in the three modes of one child, interleaved; return a list of one
    Table."""
    rounds, tasks, asyncs = (5, 5000, 1250) if quick else (15, 20000, 5000)
    server = ServerChild(_SERVER, ROOT)
    runs = {mode: [] for mode in MODES}
    try:
        for round_no in range(rounds):
            shift = round_no % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                server.proc.stdin.write("%s %d %d\n" % (mode, tasks, asyncs))
                server.proc.stdin.flush()
                runs[mode].append(server._read())
    finally:
        server.close()
    table = Table("Pool patch %s: the workers' CPU time per tiny task, with vs mpcompat off "
                  "(fork Pool(2))" % "multiprocessing.pool_workers",
                  ["measure", "without", "control", "with", "ratio (medians)",
                   "ratio (paired median)", "A/A control", "with / slower without", "target",
                   "result"])
    for key, label in (("workers", "workers' CPU"), ("parent", "parent's CPU"),
                       ("wall", "wall")):
        mid = {mode: median([r[key] for r in runs[mode]]) for mode in MODES}
        judged = mid["with"] / max(mid["without"], mid["control"])
        paired = median([w[key] / o[key] for w, o in zip(runs["with"], runs["without"])])
        table.add(label, fmt_ms(mid["without"]), fmt_ms(mid["control"]), fmt_ms(mid["with"]),
                  "%.3f" % (mid["with"] / mid["without"]), "%.3f" % paired,
                  "%.3f" % (mid["control"] / mid["without"]), "%.3f" % judged,
                  "<= %.2f" % TARGET if key == "workers" else "(shown)",
                  verdict(judged <= TARGET) if key == "workers" else "")
    table.notes.append(
        "%d interleaved rounds in one child, a fresh fork Pool(2) per measurement, warmed up; "
        "the job: map of %d tiny tasks, chunksize=1, then %d apply_async; workers' CPU: "
        "/proc/PID/schedstat of both workers over the job; medians over rounds; paired median: "
        "the median of with / without within a round; verdict: 'with' against the slower of "
        "the two unpatched modes" % (rounds, tasks, asyncs))
    return [table]


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
