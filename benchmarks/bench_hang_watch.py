"""Benchmark the stuck-wait hooks when no wait is long: MPCOMPAT_HANG_DUMP=600 vs unset.

With ``MPCOMPAT_HANG_DUMP`` set, every wait that may block (a DataLoader batch, a Pool result,
a future's result) is registered with the watchdog and unregistered after it (patches
``torch.stuck_waits``, ``multiprocessing.stuck_waits``, ``concurrent_futures.stuck_waits``).
Timed, in three long-lived child processes (mpcompat active in each, as ``mpcompat run`` makes
it): one with ``MPCOMPAT_HANG_DUMP=600`` ("with"), one without ("without") and a second one
without ("control": its ratio to "without" shows this machine's noise). Each round asks every
child for every case, in an order rotated by one per round; best of the rounds. Cases: a
DataLoader epoch (2 fork workers, persistent, 2000 batches of one small tensor), ``Pool.map``
of 2000 small tasks (2 fork workers, chunksize 1: 2000 chunks arriving), 1000
``Pool.apply_async(...).get()`` round trips, 5000 ThreadPoolExecutor ``submit(...).result()``
round trips. Target: ratio <= 1.05. Run: ``python benchmarks/bench_hang_watch.py [--quick]``
or ``benchmarks/run.py hang_watch``.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from _common import Table, fmt_ms, verdict  # noqa: E402

TARGET = 1.05
PATCHES = ("torch.stuck_waits", "multiprocessing.stuck_waits", "concurrent_futures.stuck_waits")
CASES = ("DataLoader epoch: 2000 batches, 2 workers",
         "Pool.map: 2000 small tasks, chunksize 1",
         "Pool.apply_async(...).get(): 1000 round trips",
         "Future.result(): 5000 ThreadPoolExecutor round trips")


def small(x):
    """The Pool task: next to nothing."""
    return x + 1


class Items(object):
    """A map-style dataset of 2000 one-element tensors (defined here: fork workers see it)."""

    def __init__(self, torch):
        self.torch = torch

    def __len__(self):
        return 2000

    def __getitem__(self, i):
        return self.torch.tensor([i])


def _child():
    """A child: set everything up, then time the case named on each stdin line."""
    import concurrent.futures
    import multiprocessing
    import mpcompat
    import torch
    from torch.utils.data import DataLoader

    fork = multiprocessing.get_context("fork")
    loader = DataLoader(Items(torch), batch_size=1, num_workers=2, persistent_workers=True,
                        multiprocessing_context=fork)
    pool = fork.Pool(2)
    executor = concurrent.futures.ThreadPoolExecutor(1)

    def epoch():
        for _ in loader:
            pass

    def pool_map():
        pool.map(small, range(2000), chunksize=1)

    def apply_trips():
        for i in range(1000):
            pool.apply_async(small, (i,)).get()

    def future_trips():
        for i in range(5000):
            executor.submit(small, i).result()

    cases = dict(zip(CASES, (epoch, pool_map, apply_trips, future_trips)))
    for func in cases.values():
        func()  # warm up: workers started, code paths hot
    states = {p.name: p.state for p in mpcompat.status().patches if p.name in PATCHES}
    sys.stdout.write("ready %s\n" % json.dumps(states))
    sys.stdout.flush()
    for line in sys.stdin:
        func = cases[line.strip()]
        start = time.perf_counter()
        func()
        sys.stdout.write("%r\n" % (time.perf_counter() - start))
        sys.stdout.flush()
    pool.terminate()
    executor.shutdown()


def _start(hang_dump):
    from mpcompat.launcher import command_env
    env = dict(os.environ)
    for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES", "MPCOMPAT_HANG_DUMP"):
        env.pop(name, None)
    if hang_dump:
        env["MPCOMPAT_HANG_DUMP"] = hang_dump
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]]
                                                  if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"],
                            env=command_env(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            universal_newlines=True, bufsize=1)
    return proc


def _ready(proc):
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        raise RuntimeError("benchmark child failed to start: %r" % line)
    return json.loads(line[len("ready "):])


def _ask(proc, case):
    proc.stdin.write(case + "\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def run(quick=False):
    """Time the cases in the three children, interleaved; return a list of one Table."""
    rounds = 5 if quick else 15
    children = {"with": _start("600"), "without": _start(None), "control": _start(None)}
    try:
        states = {name: _ready(proc) for name, proc in children.items()}
        for name in PATCHES:
            assert states["with"][name] == "applied", states
            assert states["without"][name] == "not needed", states
        names = list(children)
        times = {(case, name): [] for case in CASES for name in names}
        for round_no in range(rounds):
            for case in CASES:
                shift = (round_no + CASES.index(case)) % len(names)
                for name in names[shift:] + names[:shift]:
                    times[(case, name)].append(_ask(children[name], case))
    finally:
        for proc in children.values():
            try:
                proc.stdin.close()
                proc.wait(30)
            except Exception:
                proc.kill()
    table = Table("Stuck-wait hooks when no wait is long: MPCOMPAT_HANG_DUMP=600 vs unset",
                  ["case", "unset", "MPCOMPAT_HANG_DUMP=600", "ratio", "A/A control",
                   "target", "result"])
    for case in CASES:
        best = {name: min(times[(case, name)]) for name in names}
        ratio = best["with"] / best["without"]
        table.add(case, fmt_ms(best["without"]), fmt_ms(best["with"]), "%.3f" % ratio,
                  "%.3f" % (best["control"] / best["without"]), "<= %.2f" % TARGET,
                  verdict(ratio <= TARGET))
    table.notes.append("three child processes (set, unset, unset again as control), asked in "
                       "turn, %d interleaved rounds, best of rounds; with the variable set "
                       "the three patches are applied (checked), unset they are not needed"
                       % rounds)
    trip = min(times[(CASES[3], "without")]) / 5000
    return [table, _registration_table(trip, quick)]


def _registration_table(trip, quick):
    """The cost of registering and unregistering one wait (hang_watch.enter + leave), in this
    process's main thread, against the cheapest round trip measured above."""
    from mpcompat import hang_watch
    from _common import interleaved
    hang_watch._seconds[0] = 600.0
    kind, obj, loops = hang_watch.kind(repr), object(), 200000
    enter, leave = hang_watch.enter, hang_watch.leave

    def registered():
        for _ in range(loops):
            leave(enter(obj, kind))

    def empty():
        for _ in range(loops):
            pass

    times = interleaved({"registered": registered, "empty": empty}, 5 if quick else 15)
    cost = (min(times["registered"]) - min(times["empty"])) / loops
    share = cost / trip
    table = Table("Registering one wait with the watchdog (enter + leave)",
                  ["what", "per wait", "share of one Future.result() round trip (%.1f us)"
                   % (trip * 1e6), "target", "result"])
    table.add("hang_watch.enter + leave", "%.2f us" % (cost * 1e6), "%.2f %%" % (share * 100),
              "<= %d %%" % round((TARGET - 1) * 100), verdict(share <= TARGET - 1))
    table.notes.append("%d pairs per loop, best of interleaved rounds, minus an empty loop; "
                       "one pair per batch, per Pool result, per blocking future wait: it must "
                       "fit the same budget as the ratios above even on the cheapest wait"
                       % loops)
    return table


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        _child()
        return 0
    tables = run(quick="--quick" in argv)
    for table in tables:
        print(table)
    return 1 if any("FAIL" in row for t in tables for row in t.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
