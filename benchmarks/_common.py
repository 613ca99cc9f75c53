"""Shared helpers of the benchmarks: timing, statistics and markdown tables."""
import gc
import statistics
import time

__all__ = ["Table", "interleaved", "median", "fmt_ms", "verdict"]


class Table(object):
    """A markdown table with a title and notes; ``str()`` renders it."""

    def __init__(self, title, headers, rows=None, notes=None):
        self.title, self.headers = title, list(headers)
        self.rows = [list(r) for r in rows or []]
        self.notes = list(notes or [])

    def add(self, *row):
        self.rows.append([str(cell) for cell in row])

    def __str__(self):
        cells = [self.headers] + [[str(c) for c in r] for r in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.headers))]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
        out = ["### " + self.title, "", line(self.headers),
               "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += [line(r) for r in cells[1:]]
        if self.notes:
            out.append("")
            out += ["- " + note for note in self.notes]
        return "\n".join(out)


def median(values):
    return statistics.median(values)


def interleaved(functions, repeats, disable_gc=True, limits=None):
    """Time each of ``functions`` (name -> callable) ``repeats`` times, interleaved.

    Each round runs every function once, in an order rotated by one per round, so that slow
    drifts of a noisy machine hit all of them alike; ``limits`` ({name: n}) lets a slow
    function run in only n of the rounds, spread over them. The garbage collector is off
    while a function runs. Returns ``{name: [seconds, ...]}``.
    """
    names = list(functions)
    limits = limits or {}
    times = {name: [] for name in names}
    for round_no in range(repeats):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            limit = limits.get(name)
            if limit is not None and (len(times[name]) >= limit
                                      or round_no * limit % repeats >= limit):
                continue
            func = functions[name]
            if disable_gc:
                gc.collect()
                gc.disable()
            try:
                start = time.perf_counter()
                func()
                elapsed = time.perf_counter() - start
            finally:
                if disable_gc:
                    gc.enable()
            times[name].append(elapsed)
    return times


def fmt_ms(seconds, digits=1):
    return "%.*f ms" % (digits, seconds * 1000.0)


def verdict(ok):
    return "pass" if ok else "FAIL"


def missed(tables):
    """Whether a row of ``tables`` failed its target."""
    return any("FAIL" in row for t in tables for row in t.rows)


def print_tables(tables):
    """Print ``tables``; return the exit code of a benchmark: 1 when a target is missed."""
    for table in tables:
        print(table)
    return 1 if missed(tables) else 0
