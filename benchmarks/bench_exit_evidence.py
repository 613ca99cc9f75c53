"""Benchmark patch ``multiprocessing.exit_evidence`` on healthy processes: each child start reads
the OOM kill counters (a memory cgroup's file and /proc/vmstat) and each reap is an
``os.wait4``; with the patch vs without (disabled in place: the originals back).

One child interpreter times the cases in three modes, in interleaved rounds (order rotated each
round): "with", "without" and "control" (a second "without": its ratio shows this machine's
noise). The verdict compares "with" against the slower of the two unpatched modes, best rounds:
at most 1.02x.
Run: ``python benchmarks/bench_exit_evidence.py [--quick]`` or ``benchmarks/run.py
exit_evidence``.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import (SWITCH, ServerChild, print_tables, Table,  # noqa: E402
                     patch_on_off_row, verdict)

PATCH = "multiprocessing.exit_evidence"
TARGET = 1.02

_SERVER = r'''
import json, multiprocessing, sys, time
import mpcompat
%(switch)s

def case(name, n):
    if name == "pool":  # a Pool's whole life: start, a map, close, join
        for _ in range(n):
            with multiprocessing.get_context("fork").Pool(2) as pool:
                pool.map(abs, range(200))
    elif name == "maxtasks":  # a new worker per task: a start and a reap each
        with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
            pool.map(abs, range(n), chunksize=1)
    elif name == "snapshot":  # what each start adds: the counters read
        from mpcompat.child_failures import channel
        for _ in range(n):
            channel.snapshot()
    else:  # "process-fork", "process-forkserver": start and join, in a row
        context = multiprocessing.get_context(name.split("-")[1])
        for _ in range(n):
            process = context.Process(target=abs, args=(1,))  # by name, in any child
            process.start()
            process.join()


def main():
    mode = None
    multiprocessing.get_context("forkserver").Process(target=abs, args=(1,)).start()
    print(json.dumps({"state": "ready"}), flush=True)
    for line in sys.stdin:
        wanted, name, n = line.split()
        if wanted != mode:
            mode = wanted
            switch(mode)
        start = time.perf_counter()
        case(name, int(n))
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
''' % {"patch": PATCH, "switch": SWITCH % {"patch": PATCH}}

CASES = [
    ("fork Pool(2): start, map 200 tasks, close, join; 10 in a row", "pool", 10),
    ("fork Pool(2, maxtasksperchild=1): 200 tasks, a worker each", "maxtasks", 200),
    ("fork Process start + join, 100 in a row", "process-fork", 100),
    ("forkserver Process start + join, 50 in a row", "process-forkserver", 50),
]


def run(quick=False):
    """Time each case in the three modes of one child, interleaved; return a list of one
    Table."""
    rounds = 5 if quick else 15
    server = ServerChild(_SERVER, ROOT)
    try:
        table = Table("Healthy processes with patch %s vs without" % PATCH,
                      ["case", "without", "with", "ratio (best)", "ratio (paired median)",
                       "A/A control (best)", "with / slower unpatched", "target", "result"])
        table_best = {}
        for label, case, n in CASES:
            table_best[case] = patch_on_off_row(table, server, label, case, n, rounds,
                                                TARGET)["without"]
        per_start = min(server.time("with", "snapshot", 1000) for _ in range(rounds)) / 1000
        per_process = table_best["process-fork"] / 100
        table.add("what a start adds (the counters read), per start", "", "%.1f us" % (
            per_start * 1e6), "%.3f" % (1 + per_start / per_process), "", "", "", "<= %.2f"
            % TARGET, verdict(1 + per_start / per_process <= TARGET))
        table.notes.append("%d interleaved rounds per case in one child, the patch switched on "
                           "(with) and off (without, control) in place; times: the best round "
                           "of each mode; paired median: the median over rounds of the ratio "
                           "within a round; verdict: 'with' against the slower of the two "
                           "unpatched modes; the last row: the best of %d rounds of 1000 reads, "
                           "against a fork Process start + join without the patch (this machine "
                           "is shared: the last row is the steadier measure)" % (rounds, rounds))
        return [table]
    finally:
        server.close()


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
