"""Benchmark patch ``torch.cuda_fork`` when nothing goes wrong: what it adds to the first start of
CUDA (the observer at ``torch._C._cuda_init`` records the user's frame), to each fork child
made after it (the fork hook), and to the calls after it (nothing: torch's function is back).

No GPU here: the child interpreter imports ``tests/cuda_fork/fake_cuda.py`` before torch, so
that the start goes through ``torch._C._cuda_init`` as on a GPU machine, with a start of its own
that does nothing (a real one takes hundreds of milliseconds: the observer's cost is measured
against nothing). A first start happens once per process: the child replays it, resetting
torch's ``_initialized`` and the patch's record each time, with the observer in place ("with")
or torch's function alone ("without"), interleaved, from two stacks: the user's line calling
``torch.cuda.init()``, and a start hidden 10 frames deep in a library (a file under
``site-packages``). The difference of the medians is the cost. Target: at most 0.1 ms.
Run: ``python benchmarks/bench_cuda_fork.py [--quick]`` or ``benchmarks/run.py cuda_fork``
(with torch installed).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import Table, median, print_tables, verdict  # noqa: E402

PATCH = "torch.cuda_fork"
TARGET_US = 100.0

_CHILD = r'''
import gc, json, os, sys, time
sys.path.insert(0, os.path.join(%(root)r, "tests", "cuda_fork"))
import fake_cuda
import torch
import mpcompat
from mpcompat.patches import torch_cuda_fork as patch

rounds = int(sys.argv[1])
cuda, c_module = torch.cuda, torch._C
torch_init = fake_cuda._cuda_init
assert c_module._cuda_init is not torch_init, "the patch is not applied"

LIBRARY = os.path.join(%(root)r, "site-packages", "somelib", "__init__.py")  # a library's file
library = {"torch": torch}
exec(compile("def hidden(n):\n    return hidden(n - 1) if n else torch.cuda.init()\n",
             LIBRARY, "exec"), library)


# A framework: 40 frames over 20 files of a library, the user's line outermost.
deep = torch.cuda.init
for i in range(20):
    path = os.path.join(%(root)r, "site-packages", "framework", "layer%%d.py" %% i)
    layer = {"inner": deep}
    exec(compile("def call(n=1):\n    return call(n - 1) if n else inner()\n", path, "exec"),
         layer)
    deep = layer["call"]


def direct():
    torch.cuda.init()


def in_library():
    library["hidden"](10)


def in_framework():
    deep()


def first_start(observed, call):
    cuda._initialized = False
    patch._state["start"] = None
    patch._kinds.clear()  # a real first start finds it empty
    if observed:
        patch.patcher.replace(c_module, "_cuda_init", patch._observing(torch_init),
                              target=patch.TARGET)  # as apply() does
    gc.disable()
    start = time.perf_counter()
    call()
    elapsed = time.perf_counter() - start
    gc.enable()
    assert c_module._cuda_init is torch_init and (patch._state["start"] is None) != observed
    return elapsed


times = {}
for name, call in (("direct", direct), ("library", in_library), ("framework", in_framework)):
    for observed in (True, False):
        first_start(observed, call)  # warm up
    times[name] = {True: [], False: []}
    for i in range(rounds):
        for observed in ((True, False) if i %% 2 else (False, True)):
            times[name][observed].append(first_start(observed, call))

# After the start: _lazy_init returns at once; torch's own _cuda_init is in place.
after = []
for _ in range(rounds):
    start = time.perf_counter()
    for _ in range(1000):
        cuda._lazy_init()
    after.append((time.perf_counter() - start) / 1000)

# What each fork child made after the start runs: the fork hook (one replacement).
hook = []
for _ in range(rounds):
    start = time.perf_counter()
    patch._forked()
    hook.append(time.perf_counter() - start)
    patch.patcher.restore(patch.TARGET)
print(json.dumps({"times": {k: {"with": v[True], "without": v[False]} for k, v in times.items()},
                  "after": after, "hook": hook, "torch": torch.__version__,
                  "python": sys.version.split()[0]}))
'''


def run(quick=False):
    """Time the first start with and without the observer; return a list of one Table."""
    rounds = 200 if quick else 2000
    env = dict(os.environ)
    for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", _CHILD % {"root": ROOT}, str(rounds)],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("the benchmark child failed:\n" + proc.stderr)
    data = json.loads(proc.stdout.splitlines()[-1])
    table = Table("Patch %s when nothing goes wrong (torch %s, Python %s)" % (
        PATCH, data["torch"], data["python"]),
        ["case", "without", "with", "added", "target", "result"])
    labels = {"direct": "first start: torch.cuda.init() on the user's line",
              "library": "first start hidden 10 frames deep in a library",
              "framework": "first start 60 frames deep in a framework (20 files)"}
    for name in ("direct", "library", "framework"):
        without, with_ = (median(data["times"][name][m]) for m in ("without", "with"))
        added = (with_ - without) * 1e6
        table.add(labels[name], "%.1f us" % (without * 1e6), "%.1f us" % (with_ * 1e6),
                  "%.1f us" % added, "<= %.0f us" % TARGET_US, verdict(added <= TARGET_US))
    table.add("each call after the start (torch._C._cuda_init is torch's own again)",
              "", "%.2f us" % (median(data["after"]) * 1e6), "0 (no code of mpcompat runs)",
              "", "")
    table.add("each fork child made after the start: the fork hook",
              "", "%.1f us" % (median(data["hook"]) * 1e6), "", "", "")
    table.notes.append("%d interleaved first starts per case and mode in one child interpreter "
                       "(medians); the start itself is a stand-in that does nothing (no GPU "
                       "here; a real one takes 100-1000 ms), so 'added' is all the observer "
                       "costs: it records file names and line numbers only, the source lines "
                       "are read when a note needs them" % rounds)
    return [table]


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
