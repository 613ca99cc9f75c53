"""A spawn Pool mapping an object whose class is defined under ``if __name__ == "__main__":``.

Without mpcompat each worker dies unpickling ``Normalize`` (the ``__mp_main__`` import skips the
guard; only its stderr says so), the Pool replaces it for ever and the parent's wait ends in an
empty ``TimeoutError``. With mpcompat the Pool fails at once, naming the class, line and fix.
"""
import re
import time

from mpcompat.diagnose import main_guard

TITLE = "Pool(spawn).map over an object whose class is defined under if __name__ == \"__main__\""
ORDER = 15
NEEDS = ()
TIMEOUT = 30

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


def run():
    """Run the script; return what the parent's error says, or raise with what happened."""
    from mpcompat.demo.train_script import run_train_script
    start = time.time()
    # the script waits 5 s for the Pool's result
    outcome, stderr, path = run_train_script(SCRIPT, [5.0], timeout=TIMEOUT - 5)
    if outcome["ok"]:
        return "the Pool worked: %r" % (outcome["result"],)
    text = " ".join("\n".join([outcome["message"]] + outcome["notes"]).split())
    if "Normalize" in text and "%s, line %d" % (path, CLASS_LINE) in text \
            and "module level" in text:
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
