"""A spawn DataLoader whose samples hold a ``threading.Lock`` (pytorch#142884).

The worker's result queue cannot pickle a sample: it prints the error to the worker's stderr
and drops the sample, and the main process waits forever. With mpcompat the worker sends the
error instead, and the main process raises it, naming ``batch['lock']`` and what to do.
"""
import subprocess
import time

TITLE = "DataLoader(spawn, batch_size=None) whose samples hold a threading.Lock"
ORDER = 45
NEEDS = ("torch",)
TIMEOUT = 20

SCRIPT = '''\
import json
import threading
import time
import traceback

import torch.utils.data as data


class Samples(data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return {"x": index, "lock": threading.Lock()}


if __name__ == "__main__":
    loader = data.DataLoader(Samples(), batch_size=None, num_workers=1,
                             multiprocessing_context="spawn")
    batches = iter(loader)  # kept: the interpreter's exit stops its workers at once
    start = time.time()
    try:
        outcome = {"ok": True, "batches": len([batch for batch in batches])}
    except Exception as exc:
        outcome = {"ok": False, "type": type(exc).__name__,
                   "message": "".join(traceback.format_exception_only(type(exc), exc))}
    outcome["seconds"] = time.time() - start
    print("OUTCOME " + json.dumps(outcome), flush=True)
'''


def run():
    """Run the script; return the main process's error line naming ``batch['lock']``."""
    from mpcompat.demo.train_script import run_train_script
    wait = TIMEOUT - 5
    start = time.time()
    try:
        outcome, _, _ = run_train_script(SCRIPT, timeout=wait)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
        printed = "cannot pickle '_thread.lock' object" in stderr
        raise RuntimeError(
            "no batch and no error after %d s: the main process waits forever%s" % (
                wait, "; only the worker's stderr says \"TypeError: cannot pickle "
                "'_thread.lock' object\"" if printed else ""))
    if outcome["ok"]:
        return "the DataLoader yielded %d samples" % outcome["batches"]
    named = [l.strip() for l in outcome["message"].splitlines() if "batch['lock']" in l]
    if not named:
        raise RuntimeError("the main process raised %s after %.1f s: %s" % (
            outcome["type"], outcome["seconds"], outcome["message"].strip().splitlines()[0]))
    return "after %.1f s (%.1f s in all) the main process raises %s naming %s" % (
        outcome["seconds"], time.time() - start, outcome["type"], named[0])
