"""A spawn Pool mapping an object whose class is defined under ``if __name__ == "__main__":``.

The script (written to a temporary directory and run as a real main script) defines its
``Normalize`` class inside its main guard and maps an instance over a spawn Pool. The task
pickles by reference (``__main__.Normalize``); each spawn worker imports the script as
``__mp_main__``, which skips the guard, and dies with "Can't get attribute 'Normalize' on
<module '__mp_main__'>" on its first task. Without mpcompat the Pool replaces the dead workers
for ever and the parent's wait gives up with an empty ``TimeoutError`` (without a timeout it
hangs); only the workers' stderr (often lost, e.g. under a job scheduler) says what happened.
With mpcompat the Pool fails at once and its error names the class, the file and line, and the
fix.
"""
import re
import time

from mpcompat.diagnose import main_guard

TITLE = "Pool(spawn).map over an object whose class is defined under if __name__ == \"__main__\""
ORDER = 15
NEEDS = ()
TIMEOUT = 30
WAIT = 5.0  # how long the script waits for the Pool's result

SCRIPT = '''\
import json
import multiprocessing
import sys
import time


def load(index):
    return float(index)


if __name__ == "__main__":
    class Normalize(object):
        def __init__(self, scale):
            self.scale = scale

        def __call__(self, index):
            return load(index) * self.scale

    start = time.time()
    try:
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            result = pool.map_async(Normalize(0.5), range(8), chunksize=1).get(timeout=float(sys.argv[1]))
        outcome = {"ok": True, "result": result}
    except Exception as exc:
        outcome = {"ok": False, "type": "%s.%s" % (type(exc).__module__, type(exc).__name__),
                   "message": str(exc),
                   "notes": [n for n in getattr(exc, "__notes__", []) if isinstance(n, str)]}
    outcome["seconds"] = time.time() - start
    print("OUTCOME " + json.dumps(outcome), flush=True)
'''
CLASS_LINE = 12  # the line of "class Normalize" in SCRIPT


def run_script(wait=WAIT, timeout=TIMEOUT - 5):
    """Run the script (see :func:`mpcompat.demo.train_script.run_train_script`); return
    ``(outcome, stderr, path)``."""
    from mpcompat.demo.train_script import run_train_script
    return run_train_script(SCRIPT, [wait], timeout=timeout)


def names_the_fix(text, path):
    """Whether ``text`` names Normalize, where it is defined and the fix."""
    flat = " ".join(text.split())
    return ("Normalize" in flat and "%s, line %d" % (path, CLASS_LINE) in flat
            and "module level" in flat)


def run():
    """Run the script; return what the parent's error says, or raise with what happened."""
    start = time.time()
    outcome, stderr, path = run_script()
    if outcome["ok"]:
        return "the Pool worked: %r" % (outcome["result"],)
    text = "\n".join([outcome["message"]] + outcome["notes"])
    if names_the_fix(text, path):
        return ("the Pool's %s, after %.1f s, names class Normalize, defined inside `if __name__ "
                "== \"__main__\":` of train.py, line %d, and the fix: move it to module level"
                % (outcome["type"].split(".")[-1], outcome["seconds"], CLASS_LINE))
    deaths = len(re.findall(r"^AttributeError: (Can't get attribute 'Normalize'|module "
                            r"'__mp_main__' has no attribute 'Normalize')", stderr, re.M))
    message = outcome["message"].strip().splitlines()[:1]
    raise RuntimeError(
        "the parent got %s(%s) after %.1f s (%.1f s in all); meanwhile %d worker processes died, "
        "each printing only to its own stderr \"%s\"" % (
            outcome["type"], repr(message[0]) if message else "", outcome["seconds"],
            time.time() - start, deaths, main_guard.missing_message("Normalize")))
