"""Benchmark the Pool patch on the success path: a Pool with patch ``multiprocessing.pool_workers``
(a channel per worker, the parent dispatches each task and reads each result from the worker's
channel) vs the standard-library Pool with the patch disabled.

One child interpreter times the cases in three modes, in interleaved rounds (order rotated each
round): "with" (the patch applied), "without" (``mpcompat.activate(disabled_patches=[...])``:
the originals back) and "control", a second "without" (its ratio shows this machine's noise).
Each measurement starts a fresh fork ``Pool(2)`` in that mode (a pool keeps the handlers and
workers it started with), warms it up, and times only the job. One child for all modes:
separate children differed by where the scheduler put them, by up to 20% on this shared 2-core
machine. The ratio of the best rounds is reported with the median of the ratios within a round.
The verdict compares "with" against the slower of the two unpatched modes: at most 1.05x.
Run: ``python benchmarks/bench_pool_hooks.py [--quick]`` or ``benchmarks/run.py pool_hooks``.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import (SWITCH, ServerChild, print_tables, Table,  # noqa: E402
                     patch_on_off_row)

PATCH = "multiprocessing.pool_workers"
TARGET = 1.05

# The child: one Pool, then one case per line read from stdin; prints the seconds it took.
_SERVER = r'''
import json, multiprocessing, multiprocessing.pool, sys, time
import mpcompat


def double(x):
    return 2 * x
%(switch)s

def main():
    mode = None
    print(json.dumps({"state": "ready"}), flush=True)
    for line in sys.stdin:
        wanted, case, n = line.split()
        if wanted != mode:
            mode = wanted
            switch(mode)
        n = int(n)
        pool = multiprocessing.get_context("fork").Pool(2)
        pool.map(double, range(200), chunksize=1)
        start = time.perf_counter()
        if case == "map":
            pool.map(double, range(n))
        elif case.startswith("chunks"):  # chunksize=100 repeated 10 times: 1 ms alone is noise
            size = int(case[len("chunks"):])
            for _ in range(10 if size > 1 else 1):
                pool.map(double, range(n), chunksize=size)
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
''' % {"patch": PATCH, "switch": SWITCH % {"patch": PATCH}}

CASES = [
    ("10,000 tiny tasks, chunksize=1", "chunks1", 10000),
    ("10,000 tiny tasks, chunksize=100 (the job 10 times)", "chunks100", 10000),
    ("Pool.map, 200000 items (default chunks)", "map", 200000),
    ("Pool.apply round trips, 500 in a row", "apply", 500),
    ("apply_async, 2000 pending then get()", "async", 2000),
]


def run(quick=False):
    """Time each case in the three modes of one child, interleaved; return a list of one
    Table."""
    rounds = 5 if quick else 21
    server = ServerChild(_SERVER, ROOT)
    try:
        table = Table("Pool with patch %s vs without (fork Pool(2), success path)" % PATCH,
                      ["case", "without", "with", "ratio (best)", "ratio (paired median)",
                       "A/A control (best)", "with / slower unpatched", "target", "result"])
        for label, case, n in CASES:
            if quick:
                n = max(n // 4, 100)
            patch_on_off_row(table, server, label, case, n, rounds, TARGET)
        table.notes.append("%d interleaved rounds per case in one child, a fresh fork Pool(2) "
                           "per measurement, warmed up, the patch switched on (with) and off "
                           "(without, control) in place; times: the best round of each mode; paired "
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
