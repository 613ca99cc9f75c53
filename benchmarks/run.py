"""Run the benchmarks and print their markdown tables.

    PYTHONPATH=. .venv/bin/python benchmarks/run.py              # every benchmarks/bench_*.py
    PYTHONPATH=. .venv/bin/python benchmarks/run.py views        # bench_views.py only
    PYTHONPATH=. .venv/bin/python benchmarks/run.py --quick      # fewer repetitions
    PYTHONPATH=. .venv/bin/python benchmarks/run.py --save       # also write benchmarks/results/

Each ``bench_<name>.py`` provides ``run(quick=False) -> list of _common.Table`` (each row
reports the measured value, the target and pass/FAIL) and can also be run on its own; one
without ``run`` is run as a script and its output printed. The exit code is 1 if any target
was missed.
"""
import argparse
import importlib
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import missed  # noqa: E402


def available():
    return sorted(name[len("bench_"):-3] for name in os.listdir(HERE)
                  if name.startswith("bench_") and name.endswith(".py"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="benchmarks to run (%s); default: all" % ", ".join(available()))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (noisier)")
    parser.add_argument("--save", action="store_true",
                        help="also write the tables to benchmarks/results/<name>.md")
    args = parser.parse_args(argv)
    names = args.names or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        parser.error("unknown benchmark(s) %s; known: %s" % (", ".join(unknown),
                                                            ", ".join(available())))
    print("## mpcompat benchmarks\n\nPython %s on %s, %d CPUs\n" % (
        platform.python_version(), platform.platform(), os.cpu_count() or 0))
    failed = False
    for name in names:
        module = importlib.import_module("bench_" + name)
        start = time.time()
        if hasattr(module, "run"):
            tables = module.run(quick=args.quick)
            text = "\n\n".join(str(t) for t in tables)
            failed |= missed(tables)
        else:  # a benchmark that is only a script: run it, print what it prints
            proc = subprocess.run([sys.executable, module.__file__], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, universal_newlines=True)
            text = proc.stdout.rstrip()
            failed |= proc.returncode != 0 or "FAIL" in text
        print(text)
        print("\n_(%s: %.1f s)_\n" % (name, time.time() - start), flush=True)
        if args.save:
            os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
            with open(os.path.join(HERE, "results", name + ".md"), "w") as f:
                f.write(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
