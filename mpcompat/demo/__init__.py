"""``python -m mpcompat demo``: real failure scenarios, each run without and with mpcompat.

Every scenario is a module ``mpcompat.demo.scenario_*`` that defines ``TITLE`` (one line),
``ORDER`` (an int for sorting) and ``run()``, which does the real thing (start a DataLoader,
spawn processes, ...) and returns a one-line description of the outcome or raises. The runner
starts a fresh child interpreter per scenario and mode: ``MPCOMPAT_DISABLE=1`` (and mpcompat
deactivated) for "without", a plain start for "with".
"""
import os
import pkgutil
import subprocess
import sys
import time

RESULT_PREFIX = "mpcompat-demo-result: "
_CHILD = """
import sys, traceback
if sys.argv[2] == "without":
    import mpcompat
    mpcompat.deactivate()
import importlib
scenario = importlib.import_module(sys.argv[1])
try:
    outcome = scenario.run()
except BaseException as exc:
    traceback.print_exc()
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    print(%r + "FAILED " + " / ".join(line.strip() for line in text if line.strip()), flush=True)
    sys.exit(1)
print(%r + "OK " + str(outcome), flush=True)
""" % (RESULT_PREFIX, RESULT_PREFIX)


def scenarios():
    """Return the scenario modules' names, in their declared order."""
    import importlib
    here = os.path.dirname(__file__)
    names = ["mpcompat.demo." + m.name for m in pkgutil.iter_modules([here])
             if m.name.startswith("scenario_")]
    modules = [importlib.import_module(n) for n in names]
    return [m.__name__ for m in sorted(modules, key=lambda m: (m.ORDER, m.__name__))]


def run_scenario(name, mode, timeout=300):
    """Run scenario ``name`` in a fresh interpreter, mode "without" or "with".

    Returns ``(ok, summary, output)``.
    """
    env = dict(os.environ)
    env.pop("MPCOMPAT_DISABLE", None)
    if mode == "without":
        env["MPCOMPAT_DISABLE"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, name, mode], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=timeout)
        output = proc.stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        output = out.decode(errors="replace") if isinstance(out, bytes) else out
        return False, "FAILED timed out after %d s (a worker hung)" % timeout, output
    lines = [l for l in output.splitlines() if l.startswith(RESULT_PREFIX)]
    if not lines:
        tail = [l for l in output.strip().splitlines() if l.strip()][-1:] or ["no output"]
        return False, "FAILED exit code %d: %s" % (proc.returncode, tail[0]), output
    summary = lines[-1][len(RESULT_PREFIX):]
    return summary.startswith("OK"), summary, output


def add_arguments(parser):
    """Options of ``mpcompat demo``."""
    parser.add_argument("names", nargs="*", metavar="SCENARIO",
                        help="run only scenarios whose module name contains one of these")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each child's whole output")


def main(args):
    """Run the scenarios; exit 0 when every scenario works with mpcompat."""
    names = [n for n in scenarios() if not args.names or any(s in n for s in args.names)]
    if not names:
        print("no scenario matches %s" % " ".join(args.names))
        return 2
    all_fixed = True
    for index, name in enumerate(names, 1):
        module = sys.modules[name]
        print("[%d] %s" % (index, module.TITLE), flush=True)
        for mode in ("without", "with"):
            start = time.time()
            ok, summary, output = run_scenario(name, mode)
            print("    %-17s %s  (%.1f s)" % (mode + " mpcompat:", summary, time.time() - start),
                  flush=True)
            if args.verbose:
                print("      | " + output.rstrip().replace("\n", "\n      | "))
            if mode == "with" and not ok:
                all_fixed = False
    print("\n%s" % ("every scenario works with mpcompat" if all_fixed
                    else "some scenarios still fail with mpcompat"))
    return 0 if all_fixed else 1
