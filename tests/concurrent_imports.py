"""A script for the concurrent-import stress tests: ``python concurrent_imports.py SEED MODULE...``.

Eight threads start together and import the given patch targets in their own random orders,
with random small delays and a tiny switch interval (both drawn from SEED), in a fresh
interpreter where mpcompat is active and none of them is imported yet. Prints one JSON line:
every patch's state, applications and reason, the target modules imported, and every warning
raised (by any thread).
"""
import faulthandler
import importlib
import importlib.machinery
import json
import os
import random
import sys
import threading
import time
import warnings

caught = []


def _record(message, category, filename, lineno, file=None, line=None):
    caught.append("%s: %s" % (category.__name__, message))


warnings.showwarning = _record
warnings.simplefilter("always")

# How many times each module's code ran, counted here, independently of mpcompat: a finder
# just in front of the path finder counts every exec_module() of the loaders it finds (cv2 runs
# twice: its package replaces itself with the extension module of the same name).
code_runs = {}


class _CountingFinder(object):
    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                code_runs[name] = code_runs.get(name, 0) + 1
                run(module)
            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), _CountingFinder())

# collections/abc.py replaces itself in sys.modules; on Python 3.13 a thread that runs
# "from collections.abc import Mapping" (selectors does) while another thread executes that file
# can get the half-made module and an ImportError, with or without mpcompat (3 runs in 200 of
# this script's threads failed so without mpcompat imported). Not what this test is about.
import collections.abc  # noqa: E402,F401

import mpcompat  # noqa: E402  (activates; no target is imported yet)


def main(seed, targets):
    already = sorted(t for t in targets if t in sys.modules)
    barrier = threading.Barrier(8)
    errors = []

    def run(i):
        rnd = random.Random(seed * 100 + i)
        order = list(targets)
        rnd.shuffle(order)
        barrier.wait()
        time.sleep(rnd.random() * 0.005)
        try:
            for name in order[:rnd.randint(1, len(order))]:
                # The top-level package first: importing a submodule of a package that another
                # thread is still initializing can deadlock inside CPython, mpcompat or not
                # (multiprocessing and its reduction/context modules import each other).
                importlib.import_module(name.split(".")[0])
                importlib.import_module(name)
        except BaseException as exc:  # reported, never swallowed
            errors.append("%s: %r" % (i, exc))

    # A hang prints every thread's stack and ends the run (the caller tells CPython's own
    # hangs from others by those stacks).
    faulthandler.dump_traceback_later(float(os.environ.get("HANG_AFTER", "60")), exit=True)
    sys.setswitchinterval(1e-6 * (1 + seed % 7))
    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    faulthandler.cancel_dump_traceback_later()
    sys.setswitchinterval(0.005)
    for name in targets:
        importlib.import_module(name)
    rows = {p.name: [p.state, p.applications, p.reason, list(p.targets)]
            for p in mpcompat.status().patches}
    # how many times each target's code ran (cv2 runs twice: its package replaces itself)
    executions = {name: code_runs.get(name, 0) for row in rows.values() for name in row[3]}
    print(json.dumps({"rows": rows, "warnings": caught, "errors": errors,
                      "imported_before": already, "modules": sorted(sys.modules),
                      "executions": executions}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
