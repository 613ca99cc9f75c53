"""Pay on failure (issue 34): what mpcompat adds to ``iter()`` of a fork DataLoader with 8
workers, in milliseconds, and to 8 plain fork ``Process`` starts.

Fresh interpreters, started in rounds of three in a rotated order: "with" (``import mpcompat``,
active), "without" and "control" (the same with ``MPCOMPAT_DISABLE=1``; the control shows this
machine's noise). Each times its first ``iter()`` (the workers started; patches that wait for
a first use apply there) and then 5 more, each after the previous iterator's workers were shut
down; the Process job starts 8 ``Process(target=int)`` and joins them, 1 + 5 times. Measured:
wall time, the parent's CPU time and its page faults (a fork parent pays a copy-on-write fault
for each page it writes after a fork, so each page a worker start touches costs once per
worker). Verdict: the median over the rounds, wall time with against the slower of without and
control, at most +2 ms, for the first ``iter()`` and for the later ones. Where the machine has
fewer cores than workers, the workers' own start competes with the parent for the CPU: the
parent's CPU time is what a machine with a core per worker would see.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_fork_starts.py [--quick] [--root CHECKOUT]

``--root`` measures another checkout's mpcompat (an older tree, for a before and after).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, median, print_tables, verdict  # noqa: E402

ROOT = os.path.dirname(HERE)  # the checkout whose mpcompat is measured, unless --root
TARGET_MS = 2.0
LATER = 5
_CHILD = r"""
import json, multiprocessing, resource, sys, time, warnings
import mpcompat

if sys.argv[1] == "loader":
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    warnings.filterwarnings("ignore", "This DataLoader will create")  # more workers than CPUs
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, num_workers=8,
                        multiprocessing_context="fork")

    def timed():
        batches = iter(loader)
        yield
        next(batches)
        del batches  # its workers shut down before the next iter()
else:
    context = multiprocessing.get_context("fork")

    def timed():
        processes = [context.Process(target=int) for _ in range(8)]
        for process in processes:
            process.start()
        yield
        for process in processes:
            process.join()
times = []
for _ in range(1 + %d):
    job = timed()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start, cpu = time.perf_counter(), time.process_time()
    next(job)
    times.append([time.perf_counter() - start, time.process_time() - cpu,
                  resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults])
    next(job, None)
print(json.dumps({"active": mpcompat.is_active(), "times": times}))
""" % LATER


def _child(root, job, disabled):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPCOMPAT_")}
    env["PYTHONPATH"] = root
    if disabled:
        env["MPCOMPAT_DISABLE"] = "1"
    proc = subprocess.run([sys.executable, "-c", _CHILD, job], env=env, cwd=root,
                          stdout=subprocess.PIPE, universal_newlines=True, check=True)
    out = json.loads(proc.stdout.splitlines()[-1])
    if out["active"] == disabled:
        raise RuntimeError("mpcompat active: %s, expected %s" % (out["active"], not disabled))
    return out["times"]


def run(quick=False, root=ROOT):
    """Return the table, for the mpcompat of checkout ``root``."""
    rounds = 5 if quick else 15
    # .pyc files first: a first start would compile the patches it loads where none is written
    # (PYTHONDONTWRITEBYTECODE), and time that
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(root, "mpcompat")],
                   check=True)
    modes = ["with", "without", "control"]
    first = {mode: [] for mode in modes}
    later = {mode: [] for mode in modes}
    starts = {mode: [] for mode in modes}
    for round_no in range(rounds):
        shift = round_no % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            times = _child(root, "loader", disabled=mode != "with")
            first[mode].append(times[0])
            later[mode].append([median(column) for column in zip(*times[1:])])
            times = _child(root, "processes", disabled=mode != "with")
            starts[mode].append([median(column) for column in zip(*times[1:])])
    table = Table("Fork workers started with vs without mpcompat: the parent's cost",
                  ["what is timed", "wall: without / with / control", "with - slower without",
                   "parent CPU: without / with / control", "parent page faults: the same",
                   "target", "result"])
    for name, values, target in (
            ("DataLoader (8 workers): the first iter(), in a fresh process", first, TARGET_MS),
            ("DataLoader: each later iter() (median of %d per process)" % LATER, later,
             TARGET_MS),
            ("8 Process(target=int).start() (median of %d per process)" % LATER, starts, None)):
        t = {mode: [median(column) for column in zip(*v)] for mode, v in values.items()}
        added = (t["with"][0] - max(t["without"][0], t["control"][0])) * 1e3
        row = lambda i, scale, form: " / ".join(form % (t[m][i] * scale)
                                                for m in ("without", "with", "control"))
        table.add(name, row(0, 1e3, "%.1f ms"), "%+.1f ms" % added, row(1, 1e3, "%.1f ms"),
                  row(2, 1, "%.0f"), "<= +%.0f ms" % target if target else "(none)",
                  verdict(added <= target) if target else "")
    table.notes.append("medians over %d rounds of three fresh interpreters per job (rotated "
                       "order); mpcompat of %s; Python %s, torch %s, %d CPUs" % (
                           rounds, root, sys.version.split()[0], _torch_version(),
                           os.cpu_count() or 0))
    return [table]


def _torch_version():
    import importlib.metadata
    return importlib.metadata.version("torch")


def main(argv=None):
    """Print the table; return 0 when the target is met."""
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds, not 15")
    parser.add_argument("--root", default=ROOT, help="the checkout to measure")
    args = parser.parse_args(argv)
    return print_tables(run(quick=args.quick, root=os.path.abspath(args.root)))


if __name__ == "__main__":
    sys.exit(main())
