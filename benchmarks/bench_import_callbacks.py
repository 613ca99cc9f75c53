"""What mpcompat's import hook costs the first import of the patched libraries.

Two measurements, each in fresh child interpreters (Python 3.11, torch 2.13, nuscenes-devkit
1.2.0), runs paired and alternated so that a noisy machine slows both sides alike:

1. CPU time spent inside mpcompat's import callbacks
   (``mpcompat.activation._call_back``, which runs every callback: the patch manager,
   the version checks, each patch's apply) while the child imports torch, nuscenes-devkit's
   detection and tracking data classes and multiprocessing.
   That includes importing wrapt once (the library patches wrap torch and nuscenes callables
   with it), whose cost is wrapt's, measured on its own right after ``import torch``. Target:
   the callbacks' own work, without that one import, median at most 5 ms.
2. ``import torch`` with mpcompat active against ``MPCOMPAT_DISABLE=1``: the instructions it
   executes (valgrind's callgrind, one run each: the count does not depend on what else this
   shared machine does), target at most 1.01x; and its CPU time, the median of paired ratios,
   reported (it swings by a few percent from run to run here, more than the target).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, median, verdict  # noqa: E402
from bench_startup import compile_package, count_instructions, repo_env  # noqa: E402

CALLBACK_TARGET_MS = 4.0
RATIO_TARGET = 1.01

CALLBACKS = r"""
import json, sys, time
import mpcompat
from mpcompat import activation as importhook
spent = [0.0]
per_module = {}
original = importhook._call_back
def timed(module):
    start = time.process_time()
    try:
        original(module)
    finally:
        took = time.process_time() - start
        spent[0] += took
        per_module[module.__name__] = per_module.get(module.__name__, 0.0) + took
importhook._call_back = timed
start = time.process_time()
import multiprocessing, multiprocessing.pool, concurrent.futures
import torch
from nuscenes.eval.detection.data_classes import DetectionConfig
from nuscenes.eval.tracking.data_classes import TrackingConfig
total = time.process_time() - start
states = sorted({p.state for p in mpcompat.status().patches})
print(json.dumps({"callbacks": spent[0], "total": total, "states": states,
                  "wrapt": "wrapt" in sys.modules,
                  "top": sorted(per_module.items(), key=lambda kv: -kv[1])[:4]}))
"""

WRAPT_AFTER_TORCH = r"""
import json, time
import torch
start = time.process_time()
import wrapt
print(json.dumps({"wrapt": time.process_time() - start}))
"""

IMPORT_TORCH = r"""
import json, time
import mpcompat  # active, or (MPCOMPAT_DISABLE=1) off: as an installed wheel's .pth would leave it
start = time.process_time()
import torch
print(json.dumps({"import_torch": time.process_time() - start}))
"""


def _child(python, code, env):
    proc = subprocess.run([python, "-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick=False):
    python = os.path.join(REPO, ".venv", "bin", "python")
    env = repo_env()
    compile_package(python, env)
    disabled = dict(env, MPCOMPAT_DISABLE="1")
    runs = 7 if quick else 21
    _child(python, IMPORT_TORCH, env)  # warm the file cache
    callbacks, totals, ratios, with_ms, without_ms, top, wrapt = [], [], [], [], [], None, []
    for i in range(runs):
        out = _child(python, CALLBACKS, env)
        callbacks.append(out["callbacks"])
        wrapt.append(_child(python, WRAPT_AFTER_TORCH, disabled)["wrapt"])
        totals.append(out["total"])
        top = out["top"]
        pair = [("with", env), ("without", disabled)]
        if i % 2:
            pair.reverse()
        got = {name: _child(python, IMPORT_TORCH, e)["import_torch"] for name, e in pair}
        with_ms.append(got["with"])
        without_ms.append(got["without"])
        ratios.append(got["with"] / got["without"])
    cb_ms = median(callbacks) * 1000
    wrapt_ms = median(wrapt) * 1000
    own_ms = median([c - w for c, w in zip(callbacks, wrapt)]) * 1000
    ratio = median(ratios)
    table = Table("Import callbacks: torch, nuscenes-devkit detection and tracking data "
                  "classes, multiprocessing (Python %d.%d, %d paired runs)"
                  % (sys.version_info[0], sys.version_info[1], runs),
                  ["measure", "with mpcompat", "without", "value", "target", "result"])
    table.add("CPU in mpcompat's import callbacks, all", "%.1f ms" % cb_ms, "-",
              "%.1f ms (of %.0f ms importing)" % (cb_ms, median(totals) * 1000), "-", "-")
    table.add("... of which importing wrapt (after torch)", "%.1f ms" % wrapt_ms, "-",
              "%.1f ms" % wrapt_ms, "-", "-")
    table.add("... the callbacks' own work", "%.1f ms" % own_ms, "-",
              "%.1f ms (median of paired differences)" % own_ms,
              "<= %.0f ms" % CALLBACK_TARGET_MS, verdict(own_ms <= CALLBACK_TARGET_MS))
    table.add("CPU of `import torch` (reported)", "%.0f ms" % (median(with_ms) * 1000),
              "%.0f ms" % (median(without_ms) * 1000), "%.3fx (median paired ratio)" % ratio,
              "-", "-")
    if not quick:
        counts = {name: count_instructions(python, e, "import mpcompat, torch", cwd=REPO)
                  for name, e in (("with", env), ("without", disabled))}
        if None not in counts.values():
            by = counts["with"] / float(counts["without"])
            table.add("instructions of `import torch` (callgrind)",
                      "%.0f M" % (counts["with"] / 1e6), "%.0f M" % (counts["without"] / 1e6),
                      "%.4fx" % by, "<= %.2fx" % RATIO_TARGET, verdict(by <= RATIO_TARGET))
    table.notes.append("largest callbacks in the last run: %s" % ", ".join(
        "%s %.1f ms" % (name, sec * 1000) for name, sec in top))
    table.notes.append("callback CPU per run (ms): %s" % " ".join(
        "%.1f" % (c * 1000) for c in callbacks))
    return [table]


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
