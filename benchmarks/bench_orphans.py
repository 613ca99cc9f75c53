"""No orphans (issue 35): the children left alive 2 s after their parent's death, without
mpcompat (``MPCOMPAT_DISABLE=1``) and with it, side by side in one run.

Each row (``tests/orphans_helpers.MATRIX``): a parent starts workers of one kind (Pool,
ProcessPoolExecutor, DataLoader, ``Process``, ``torch.multiprocessing.start_processes``,
torchrun's ranks) under one start method, brings them into one state (busy in a task, blocked
writing to a pipe nobody reads, idle), and dies: SIGKILL, SIGTERM, or the kernel's OOM killer
(it moves into a memory cgroup of 200 MB and allocates). Survivors: its descendants as it was
killed (workers, the forkserver, the resource tracker, their children) still alive 2 s after
it died. Two rows must not kill early: a child whose creating thread ended must live 10 s
on while the parent lives (then end with it), and one started with
``MPCOMPAT_OUTLIVE_PARENT=1`` must outlive its parent (its "after" is all its children), as
must one whose parent closed every descriptor it had and lived on 10 s (it cannot tell the
death that comes after).
Every scenario of one side runs at once (a row needs no CPU while it waits); the OOM rows need
root and a memory cgroup (else they are reported as not run).

    .venv/bin/python benchmarks/bench_orphans.py            # exit 1 if a target is missed
    .venv/bin/python benchmarks/bench_orphans.py --no-torch # the rows that need no torch
"""
import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
for path in (HERE, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)

from _common import Table, print_tables, verdict  # noqa: E402
from orphans_helpers import MATRIX, run_rows  # noqa: E402


def measure(rows):
    """``(off, on)``: :func:`orphans_helpers.run_rows`' results without and with mpcompat."""
    base = tempfile.mkdtemp(prefix="mpc-orphans-")
    try:
        return [run_rows(rows, base, enabled) for enabled in (False, True)]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    """Print the table; exit 1 if a row has a survivor (or lost its kept child) with mpcompat."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch", action="store_true", help="only the rows without torch")
    args = parser.parse_args()
    rows = [row for row in MATRIX if not (args.no_torch and row.torch)]
    off, on = measure(rows)
    table = Table("Children alive 2 s after their parent died (detached: 10 s, must stay)",
                  ["scenario (kind/method/state/killer)", "children", "before", "after",
                   "death notes", "verdict"])
    missed = 0
    for row in rows:
        before, after = off.get(repr(row)), on.get(repr(row))
        if before is None or after is None:
            table.add(repr(row), "-", "-", "-", "-", "not run (no memory cgroup here)")
            continue
        errors = [r["error"] for r in (before, after) if r["error"]]
        target = len(after["started"]) if row.kind in ("detached", "closed") else 0
        good = (not errors and len(after["survivors"]) == target and bool(after["started"]) and
                after.get("kept", after["started"]) == after["started"])
        missed += not good
        table.add(repr(row), len(after["started"]), len(before["survivors"]),
                  len(after["survivors"]), len(after["notes"]),
                  verdict(good) + ("" if not errors else ": " + "; ".join(errors)))
    table.notes.append("children: the parent's descendants as it died (workers, forkserver, "
                       "resource tracker), with mpcompat; before/after: those alive 2 s after "
                       "its death (detached: 10 s), without mpcompat (MPCOMPAT_DISABLE=1) and "
                       "with it; target after: 0, or all for the detached and closed rows; "
                       "the thread "
                       "row's child must also live 10 s after its thread ended, before the "
                       "parent is killed")
    print_tables([table])
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
