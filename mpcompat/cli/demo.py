"""``python -m mpcompat demo``: real failure scenarios, each run without and with mpcompat.

A scenario is a module ``mpcompat.demo.scenario_*`` with ``TITLE``, ``ORDER`` (for sorting),
``NEEDS`` (modules beyond the standard library), ``TIMEOUT`` (seconds per run) and ``run()``,
which does the real thing and returns a one-line outcome or raises. Each scenario and mode runs
in a fresh interpreter, "without" under ``MPCOMPAT_DISABLE=1``; one whose library is missing
is skipped.
"""
import importlib
import importlib.util
import os
import pkgutil
import signal
import subprocess
import sys
import time

RESULT_PREFIX = "mpcompat-demo-result: "
_SCENARIOS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo")
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
    # The one-line summary leaves out CPython's own "when serializing ..." notes (3.14+).
    skip = {n.strip() for n in getattr(exc, "__notes__", ()) if not n.startswith("mpcompat")}
    print(%r + "FAILED " + " / ".join(line.strip() for line in text
                                       if line.strip() and line.strip() not in skip), flush=True)
    sys.exit(1)
print(%r + "OK " + str(outcome), flush=True)
""" % (RESULT_PREFIX, RESULT_PREFIX)


def scenarios():
    """Return the scenario modules' names, in their declared order."""
    names = ["mpcompat.demo." + m.name for m in pkgutil.iter_modules([_SCENARIOS])
             if m.name.startswith("scenario_")]
    modules = [importlib.import_module(n) for n in names]
    return [m.__name__ for m in sorted(modules, key=lambda m: (m.ORDER, m.__name__))]


def missing(name):
    """The modules scenario ``name`` needs that are not installed here (a list)."""
    return [needed for needed in sys.modules[name].NEEDS
            if needed not in sys.modules and importlib.util.find_spec(needed) is None]


def run_scenario(name, mode, timeout=None):
    """Run scenario ``name`` in a fresh interpreter, mode "without" or "with"; return ``(ok,
    summary, output)``. After ``timeout`` s (default: its TIMEOUT) the child tree is killed."""
    if timeout is None:
        timeout = importlib.import_module(name).TIMEOUT
    env = dict(os.environ)
    env.pop("MPCOMPAT_DISABLE", None)
    if mode == "without":
        env["MPCOMPAT_DISABLE"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    posix = os.name == "posix"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, name, mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, start_new_session=posix)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:  # the child and what it started: its own session on POSIX
            if posix:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except OSError:
            pass
        output, _ = proc.communicate()
        stuck = getattr(importlib.import_module(name), "STUCK", None) or "a worker hung"
        return False, "FAILED timed out after %g s (%s)" % (timeout, stuck), output or ""
    lines = [l for l in output.splitlines() if l.startswith(RESULT_PREFIX)]
    if not lines:
        tail = [l for l in output.strip().splitlines() if l.strip()][-1:] or ["no output"]
        return False, "FAILED exit code %d: %s" % (proc.returncode, tail[0]), output
    summary = lines[-1][len(RESULT_PREFIX):]
    return summary.startswith("OK"), summary, output


def _clock(seconds):
    """``seconds`` as m:ss."""
    return "%d:%02d" % divmod(int(seconds), 60)


def add_arguments(parser):
    """Options of ``mpcompat demo``."""
    parser.add_argument("names", nargs="*", metavar="SCENARIO",
                        help="run only these scenarios: numbers from --list, or parts of "
                             "their names (e.g. 1 3, or views nuscenes)")
    parser.add_argument("--list", action="store_true",
                        help="list the scenarios, with what each needs, and run nothing")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each child's whole output")


def select(all_names, wanted):
    """Return ``[(number, name)]`` for ``wanted`` (numbers or name parts; all if empty), or
    raise ValueError naming what matches nothing."""
    numbered = list(enumerate(all_names, 1))
    chosen, unknown = set(), []
    for token in wanted:
        hits = {(n, name) for n, name in numbered if n == int(token)} if token.isdigit() else \
            {(n, name) for n, name in numbered if token.lower() in name.rsplit(".", 1)[1].lower()}
        if not hits:
            unknown.append(token)
        chosen |= hits
    if unknown:
        raise ValueError("no scenario matches %s (there are %d; see mpcompat demo --list)"
                         % (", ".join(unknown), len(numbered)))
    return sorted(chosen) if wanted else numbered


def main(args):
    """Run the scenarios; exit 0 when every scenario that can run here works with mpcompat."""
    try:
        chosen = select(scenarios(), args.names)
    except ValueError as exc:
        print("mpcompat demo: %s" % exc, file=sys.stderr)
        return 2
    ran = fixed = skipped = 0
    began = time.time()
    for done, (number, name) in enumerate(chosen):
        module, absent = sys.modules[name], missing(name)
        if args.list:
            needs = ", ".join(module.NEEDS) or "the standard library only"
            print("%2d. %s  [%s; needs %s%s]" % (
                number, module.TITLE, name.split(".scenario_", 1)[1], needs,
                "; not installed: " + ", ".join(absent) if absent else ""))
            continue
        # Progress, one line per scenario (a pipe gets it as it comes: flushed, no bar).
        print("[%d] %s  (scenario %d of %d, %s so far)" % (
            number, module.TITLE, done + 1, len(chosen), _clock(time.time() - began)),
            flush=True)
        if absent:
            skipped += 1
            print("    skipped (needs %s)" % ", ".join(absent), flush=True)
            continue
        ran += 1
        for mode in ("without", "with"):
            start = time.time()
            ok, summary, output = run_scenario(name, mode)
            print("    %-17s %s  (%.1f s)" % (mode + " mpcompat:", summary, time.time() - start),
                  flush=True)
            if args.verbose:
                print("      | " + output.rstrip().replace("\n", "\n      | "))
            fixed += mode == "with" and ok
    if args.list:
        return 0
    print("\n%d of %d scenarios work with mpcompat%s (%s in all)" % (
        fixed, ran, "; %d skipped: their libraries are not installed" % skipped if skipped
        else "", _clock(time.time() - began)))
    return 0 if fixed == ran else 1
