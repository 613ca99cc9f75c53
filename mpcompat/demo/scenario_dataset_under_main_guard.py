"""A spawn DataLoader over a Dataset class defined under ``if __name__ == "__main__":``.

Each worker dies unpickling ``MyDS`` (the ``__mp_main__`` import skips the guard; only its
stderr says so) and the main process says only "DataLoader worker ... exited unexpectedly".
With mpcompat that error names the class, the file and line where it is defined, and the fix.
"""
import time

TITLE = "DataLoader(spawn) over a Dataset class defined under if __name__ == \"__main__\""
ORDER = 46
NEEDS = ("torch",)
TIMEOUT = 30

SCRIPT = '''\
import json
import time
import traceback

import torch.utils.data as data

if __name__ == "__main__":
    class MyDS(data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return index

    loader = data.DataLoader(MyDS(), batch_size=None, num_workers=2,
                             multiprocessing_context="spawn")
    start = time.time()
    try:
        outcome = {"ok": True, "batches": len(list(loader))}
    except Exception as exc:
        outcome = {"ok": False, "type": type(exc).__name__,
                   "message": "".join(traceback.format_exception_only(type(exc), exc))}
    outcome["seconds"] = time.time() - start
    print("OUTCOME " + json.dumps(outcome), flush=True)
'''
CLASS_LINE = 8  # the line of "class MyDS" in SCRIPT


def run():
    """Run the script; return the line of the main process's error that names MyDS."""
    from mpcompat.demo.train_script import run_train_script
    start = time.time()
    outcome, _, path = run_train_script(SCRIPT, timeout=TIMEOUT - 5)
    if outcome["ok"]:
        return "the DataLoader yielded %d samples" % outcome["batches"]
    message = outcome["message"]
    first, flat = message.strip().splitlines()[0], " ".join(message.split())
    named = [l.strip() for l in message.splitlines() if "class MyDS is defined" in l]
    if not (named and "%s, line %d" % (path, CLASS_LINE) in flat and "module level" in flat):
        raise RuntimeError("the main process raised %s after %.1f s: %s" % (
            outcome["type"], outcome["seconds"], first))
    sentences = named[0].replace(path, "train.py").split(". ")
    fix = [s for s in sentences if s.startswith("Move ")] or [""]
    return "after %.1f s (%.1f s in all) the main process raises %s: %s ... %s" % (
        outcome["seconds"], time.time() - start, first, sentences[0], fix[0])
