"""Benchmark the error hooks when pickling succeeds: with them vs without them.

The hooks (patch ``multiprocessing.pickling_notes``) sit in ``multiprocessing.reduction.dump``
(once per process start) and ``ForkingPickler.dumps`` (every Pool task, Queue.put and
Connection.send). Timed, hooked vs the original function (both kept by the patch):
``ForkingPickler.dumps`` of a small Pool-task tuple and of a 64 KB dict of arrays, and
``reduction.dump`` of a Process object; then a real spawn
``Process.start()`` + ``join()`` with the patch applied vs disabled. Target: no slowdown beyond
noise. Run: ``python benchmarks/bench_error_hooks.py [--quick]`` or ``benchmarks/run.py
error_hooks``.
"""
import io
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from _common import print_tables, Table, fmt_ms, interleaved, verdict  # noqa: E402

PATCH = "multiprocessing.pickling_notes"
TARGET_CALL = 1.05   # best of rounds: the hooked call adds no work when pickling succeeds
TARGET_START = 1.10  # a process start is noisier


def child(x):
    """The target of the started processes."""
    return x


def _loop(func, loops):
    def run_loop():
        for _ in range(loops):
            func()
    return run_loop


def _set_patch(on):
    import mpcompat
    if on:
        mpcompat.activate()
    else:
        mpcompat.activate(disabled_patches=[PATCH])


def run(quick=False):
    """Time the hooked and original calls; return a list of one Table."""
    import multiprocessing
    from multiprocessing import context, reduction
    import numpy as np
    _set_patch(True)
    reduction.ForkingPickler.dumps(0)  # the first use: the deferred patches apply
    rounds, starts = (7, 4) if quick else (21, 10)
    pickler = reduction.ForkingPickler
    hooked_dumps = pickler.__dict__["dumps"]
    from mpcompat.patches import mp_children
    original_dumps = mp_children.pickling_patcher.original(pickler, "dumps").__func__
    assert original_dumps is not hooked_dumps.__func__, "not applied"
    # Both called as plain functions: in use, both are reached through the same classmethod
    # binding (ForkingPickler.dumps), which is not what is compared here.
    hooked_dumps = hooked_dumps.__func__
    original_dump = reduction.dump.__wrapped__
    ctx = multiprocessing.get_context("spawn")
    task = (3, 0, child, (list(range(10)), "abc"), {"flag": True})
    medium = {"a%d" % i: np.ones(1024) for i in range(8)}  # 64 KB
    process = ctx.Process(target=child, args=(list(range(100)), {"lr": 0.1}))

    def dump_process(dump):
        def call():
            context.set_spawning_popen(object())  # as Popen._launch does around the dump
            try:
                dump(process, io.BytesIO())
            finally:
                context.set_spawning_popen(None)
        return call

    cases = [
        ("ForkingPickler.dumps, small Pool task", 20000,
         lambda: original_dumps(pickler, task), lambda: hooked_dumps(pickler, task)),
        ("ForkingPickler.dumps, 64 KB dict of arrays", 2000,
         lambda: original_dumps(pickler, medium), lambda: hooked_dumps(pickler, medium)),
        ("reduction.dump, a Process object", 5000,
         dump_process(original_dump), dump_process(reduction.dump)),
    ]
    table = Table("Error hooks when pickling succeeds (with vs without)",
                  ["case", "without hooks", "with hooks", "ratio", "A/A control", "target",
                   "result"])
    for label, loops, without, with_ in cases:
        # "control" times the original once more: its ratio shows this machine's noise.
        times = interleaved({"without": _loop(without, loops), "with": _loop(with_, loops),
                             "control": _loop(without, loops)}, rounds)
        best = {name: min(t) / loops for name, t in times.items()}
        ratio = best["with"] / best["without"]
        table.add(label, "%.2f us" % (best["without"] * 1e6), "%.2f us" % (best["with"] * 1e6),
                  "%.3f" % ratio, "%.3f" % (best["control"] / best["without"]),
                  "<= %.2f" % TARGET_CALL, verdict(ratio <= TARGET_CALL))
    timings = {False: [], True: []}
    for _ in range(starts):
        for on in (False, True):
            _set_patch(on)
            start = time.perf_counter()
            p = ctx.Process(target=child, args=(1,))
            p.start()
            p.join()
            timings[on].append(time.perf_counter() - start)
    _set_patch(True)
    without, with_ = min(timings[False]), min(timings[True])
    table.add("spawn Process.start() + join()", fmt_ms(without), fmt_ms(with_),
              "%.3f" % (with_ / without), "", "<= %.2f" % TARGET_START,
              verdict(with_ / without <= TARGET_START))
    table.notes.append("calls: %d interleaved rounds of a loop, best per call, gc off while "
                       "timing; process starts: best of %d each, patch applied vs disabled "
                       "alternately" % (rounds, starts))
    return [table]


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
