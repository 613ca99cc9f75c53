"""Benchmark the sampler of DataLoader workers' private memory (``mpcompat.workers.dataset_memory``,
patch ``torch.dataloader_workers``): what it adds to ``iter()`` + 300 batches when nothing grows.

In one interpreter, interleaved: the patch as shipped (one worker's
``/proc/PID/smaps_rollup`` read in turn, each every 2 s at most often, and at most 1% of the
time; a ``time.monotonic()`` per batch); the sampler off
(``dataset_memory.start`` a no-op: the patch's other work stays); an A/A control (as shipped,
again); and a worst case that reads every worker at every batch (``INTERVAL = 0``), from which
the cost of one reading is derived. Each run: ``iter()`` of a DataLoader (2 fork workers,
batches of 32 ints) and 300 batches. The two differ by microseconds, far below this shared
machine's noise (the A/A control), so the verdict rests on what the sampler adds to such a
loop, timed directly (``start()`` and 300 per-batch checks), against the loop's median.
Target: at most 1.02x.
Run: ``python benchmarks/bench_dataset_memory.py [--quick]`` or ``benchmarks/run.py
dataset_memory``.
"""
import os
import sys
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (HERE, ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

from _common import Table, fmt_ms, interleaved, median, print_tables, verdict  # noqa: E402

TARGET = 1.02
BATCHES = 300


def measure(quick=False):
    """Time the variants in this process (mpcompat activated here: ``benchmarks/run.py`` runs
    this file as a script, in an interpreter of its own); return a list of one Table."""
    import mpcompat
    import torch.utils.data as data
    from mpcompat.workers import dataset_memory
    mpcompat.activate()
    state = {p.name: p.state for p in mpcompat.status().patches}["torch.dataloader_workers"]
    if state != "applied":
        raise RuntimeError("patch torch.dataloader_workers is %s" % state)

    class Ints(data.Dataset):
        def __len__(self):
            return 32 * BATCHES

        def __getitem__(self, index):
            return index

    loader = data.DataLoader(Ints(), batch_size=32, num_workers=2,
                             multiprocessing_context="fork")
    shipped = dataset_memory.start, dataset_memory.INTERVAL, dataset_memory.COST_SHARE
    interval = shipped[1]

    def epoch(sampler_on=True, every=False):
        def call():
            if not sampler_on:
                dataset_memory.start = lambda iterator: None
            if every:
                dataset_memory.INTERVAL, dataset_memory.COST_SHARE = 0.0, float("inf")
            try:
                assert sum(1 for _ in loader) == BATCHES
            finally:
                dataset_memory.start, dataset_memory.INTERVAL, dataset_memory.COST_SHARE = \
                    shipped
        return call

    times = interleaved({"as shipped": epoch(), "sampler off": epoch(False),
                         "as shipped (A/A)": epoch(), "a reading per batch": epoch(every=True)},
                        5 if quick else 15)
    best = {name: min(values) for name, values in times.items()}
    med = {name: median(values) for name, values in times.items()}

    def paired(name, base="sampler off"):  # the median of the rounds' ratios
        return median([a / b for a, b in zip(times[name], times[base])])
    ratio, control = paired("as shipped"), paired("as shipped (A/A)", "as shipped")
    per_reading = (med["a reading per batch"] - med["sampler off"]) / BATCHES

    iterator = iter(loader)  # one reading of 2 live workers, timed directly
    next(iterator)
    sampler = iterator._mpcompat_memory
    direct = min(timeit.repeat(lambda: dataset_memory.sample(sampler), number=20,
                               repeat=5)) / 20
    starting = min(timeit.repeat(lambda: dataset_memory.start(iterator), number=100,
                                 repeat=5)) / 100
    check = min(timeit.repeat("s = d.get('_mpcompat_memory')\nif s is not None and "
                              "monotonic() >= s.due: pass", number=10000, repeat=5,
                              globals={"d": iterator.__dict__,
                                       "monotonic": __import__("time").monotonic})) / 10000
    del iterator
    added = (starting + BATCHES * check) / med["sampler off"]

    table = Table("DataLoader workers' private memory sampled: iter() + %d batches, 2 fork "
                  "workers" % BATCHES, ["variant", "best", "median", "vs sampler off (paired "
                                        "median)", "target", "result"])
    table.add("sampler off", fmt_ms(best["sampler off"]), fmt_ms(med["sampler off"]), "1.000x",
              "-", "-")
    table.add("as shipped (each worker every %.0f s at most)" % interval,
              fmt_ms(best["as shipped"]), fmt_ms(med["as shipped"]), "%.3fx" % ratio, "-", "-")
    table.add("as shipped: start() + %d per-batch checks, timed directly" % BATCHES,
              "%.1f us + %d x %.2f us" % (starting * 1e6, BATCHES, check * 1e6), "-",
              "%.5fx" % (1 + added), "<= %.2fx" % TARGET, verdict(1 + added <= TARGET))
    table.add("as shipped, A/A control", fmt_ms(best["as shipped (A/A)"]),
              fmt_ms(med["as shipped (A/A)"]), "%.3fx of as shipped" % control, "-", "-")
    table.add("a reading per batch (worst case)", fmt_ms(best["a reading per batch"]),
              fmt_ms(med["a reading per batch"]), "%.3fx" % paired("a reading per batch"),
              "-", "-")
    every = max(interval / 2, direct / shipped[2])  # 2 workers, read in turn
    table.notes.append("one reading (one worker's smaps_rollup): %.0f us timed directly, %.0f "
                       "us derived from the worst case; as shipped, in a longer loop, a reading "
                       "would come every %.2f s here (each worker every %.0f s at most often, "
                       "and readings at most %.0f%% of the iterating thread's time): %.2f%%" % (
                           direct * 1e6, per_reading * 1e6, every, interval,
                           100 * shipped[2], 100.0 * direct / every))
    table.notes.append("%d interleaved rounds; the first reading comes %.0f s after iter(): "
                       "none in this loop" % (5 if quick else 15, interval))
    return [table]


if __name__ == "__main__":
    sys.exit(print_tables(measure(quick="--quick" in sys.argv)))
