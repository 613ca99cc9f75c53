"""Shared helpers of the benchmarks: timing, statistics and markdown tables."""
import gc
import json
import os
import statistics
import subprocess
import sys
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


class ServerChild(object):
    """A child interpreter running ``source`` (``python -c``) in ``root`` with mpcompat on its
    path (MPCOMPAT_DISABLE* unset) that times cases on request: one JSON line per request
    (``"mode case n"``), one first as it is ready (:attr:`first`)."""

    def __init__(self, source, root):
        env = dict(os.environ)
        for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES"):
            env.pop(name, None)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen([sys.executable, "-c", source], env=env, cwd=root,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     universal_newlines=True)
        self.first = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the benchmark child exited (code %s)" % self.proc.wait())
        return json.loads(line)

    def time(self, mode, case, n):
        """Seconds the child took for ``n`` runs of ``case`` in ``mode``."""
        self.proc.stdin.write("%s %s %d\n" % (mode, case, n))
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self):
        """End the child (killed if it does not end within a minute)."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
            self.proc.wait()


# The child side of a ServerChild that switches a patch (format with patch=name): with, the
# patch applied; without and control, disabled (originals back), in place.
SWITCH = r'''
def switch(mode):
    mpcompat.activate(disabled_patches=[] if mode == "with" else [%(patch)r])
    state = {p.name: p.state for p in mpcompat.status().patches}[%(patch)r]
    if state != ("applied" if mode == "with" else "disabled"):
        raise RuntimeError("mode %%s: patch %%s" %% (mode, state))
'''


def patch_on_off_row(table, server, label, case, n, rounds, target):
    """Time ``case`` in the modes with, without and control of ``server`` (a ServerChild whose
    child switches a patch), ``rounds`` rounds in an order rotated by one per round; add the
    row of ``table`` (columns: case, without, with, ratio (best), ratio (paired median), A/A
    control (best), with / slower unpatched, target, result) and return the best times."""
    names = ["with", "without", "control"]
    times = {name: [] for name in names}
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(server.time(name, case, n))
    best = {name: min(t) for name, t in times.items()}
    judged = best["with"] / max(best["without"], best["control"])
    table.add(label, fmt_ms(best["without"]), fmt_ms(best["with"]),
              "%.3f" % (best["with"] / best["without"]),
              "%.3f" % median([a / b for a, b in zip(times["with"], times["without"])]),
              "%.3f" % (best["control"] / best["without"]), "%.3f" % judged,
              "<= %.2f" % target, verdict(judged <= target))
    return best
