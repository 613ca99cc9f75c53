"""Benchmark the crash stacks on the healthy path (the crash files of the ``failure_records``
patch, ``mpcompat.child_failures.channel.prepare``):
what each worker start pays so that a native crash can show its Python stack (the child opens
its crash file and enables faulthandler; it removes the file when it ends), side by side with
the same work without it.

Two measurements, both with mpcompat active:
- The whole job, in this process, interleaved (order rotated each round): "with" (crash stacks
  on), "without" (the parent names no crash file in its children, so they skip it) and
  "control", a second "without" (its ratio shows this machine's noise). Jobs: a fork and a
  spawn ``Pool(2)`` made, mapping 200 tiny tasks and joined; a fork DataLoader with 2 workers,
  one epoch of 16 small batches. The ratio of the best rounds, with against the slower of
  the two unpatched modes: at most 1.02x.
- One worker alone: a Process doing nothing, started and joined, in the same three modes, 300
  times each (fork; 30 spawn), medians: the per-worker cost in microseconds, and the ratio, at
  most 1.02x. A fresh fork child pays its first touch of each page it writes (copy-on-write):
  that, not the system calls, is most of the cost.
Run: ``python benchmarks/bench_crash_stacks.py [--quick]`` or ``benchmarks/run.py
crash_stacks``.
"""
import multiprocessing
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, fmt_ms, interleaved, print_tables, verdict  # noqa: E402

import mpcompat  # noqa: E402,F401  (activates the patches)
from mpcompat.child_failures import channel  # noqa: E402

TARGET = 1.02
_PREPARE = channel.prepare


def _mode(on):
    """With crash stacks (the parent names a crash file in each child) or without."""
    channel.prepare = _PREPARE if on else (lambda process: None)


def _pool(method):
    def job():
        pool = multiprocessing.get_context(method).Pool(2)
        pool.map(abs, range(200))
        pool.close()
        pool.join()
    return job


def _loader():
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.arange(64.0))

    def job():
        for _ in DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context="fork"):
            pass
    return job


def _jobs():
    jobs = [("fork Pool(2), 200 tasks", _pool("fork")),
            ("spawn Pool(2), 200 tasks", _pool("spawn"))]
    try:
        jobs.append(("fork DataLoader, 2 workers, 16 batches", _loader()))
    except ImportError:  # no torch in this interpreter
        pass
    return jobs


def _compare(job, repeats):
    def run(on):
        def timed():
            _mode(on)
            job()
        return timed
    times = interleaved({"with": run(True), "without": run(False), "control": run(False)},
                        repeats)
    _mode(True)
    return {name: min(values) for name, values in times.items()}


def _process_start(method, rounds):
    """Median seconds to start and join one Process doing nothing, with and without crash
    stacks, interleaved: ``{"with": s, "without": s, "control": s}``."""
    ctx = multiprocessing.get_context(method)

    def run(on):
        def timed():
            _mode(on)
            p = ctx.Process(target=int)
            p.start()
            p.join()
        return timed
    times = interleaved({"with": run(True), "without": run(False), "control": run(False)},
                        rounds)
    _mode(True)
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def run(quick=False):
    """Return the two tables."""
    repeats = 5 if quick else 15
    jobs = Table("Crash stacks on the healthy path: the whole job with vs without",
                 ["job", "without", "with", "control", "ratio (with / slower without)",
                  "target", "result"])
    for name, job in _jobs():
        job()  # warm-up
        t = _compare(job, repeats)
        ratio = t["with"] / max(t["without"], t["control"])
        jobs.add(name, fmt_ms(t["without"]), fmt_ms(t["with"]), fmt_ms(t["control"]),
                 "%.3f" % ratio, "<= %.2f" % TARGET, verdict(ratio <= TARGET))
    jobs.notes.append("best of %d interleaved rounds; Python %s, %d CPUs" % (
        repeats, sys.version.split()[0], os.cpu_count() or 0))
    costs = Table("Crash stacks: one worker's start and join (a Process doing nothing)",
                  ["start method", "without", "with", "control", "with - slower without",
                   "ratio", "target", "result"])
    rounds = 60 if quick else 300
    for method in ("fork", "spawn"):
        t = _process_start(method, rounds if method == "fork" else rounds // 10)
        slower = max(t["without"], t["control"])
        costs.add(method, fmt_ms(t["without"], 2), fmt_ms(t["with"], 2),
                  fmt_ms(t["control"], 2), "%+.0f us" % ((t["with"] - slower) * 1e6),
                  "%.3f" % (t["with"] / slower), "<= %.2f" % TARGET,
                  verdict(t["with"] / slower <= TARGET))
    costs.notes.append("medians of %d (fork) and %d (spawn) interleaved starts; the child "
                       "opens its crash file and enables faulthandler, and removes the file "
                       "as it ends; the parent names the file, and the join checks for "
                       "a file left" % (rounds, rounds // 10))
    return [jobs, costs]


def main(argv=None):
    """Print the tables; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
