"""A spawn DataLoader whose samples hold a ``threading.Lock`` (pytorch#142884).

The script (written to a temporary directory, run as a real main script) iterates a DataLoader
with a spawn worker and ``batch_size=None`` over a dataset whose samples are
``{"x": i, "lock": threading.Lock()}``. The worker cannot pickle the sample: its result
queue's feeder thread prints the error to the worker's stderr and drops the sample, and the
main process waits for it forever. With mpcompat the worker sends the error in the sample's
place, and the main process raises it, naming ``batch['lock']`` and what to do.
"""
import json
import os
import subprocess
import sys
import tempfile
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
    from mpcompat.launcher import command_env
    directory = tempfile.mkdtemp(prefix="mpcompat-demo-")
    path = os.path.join(directory, "train.py")
    with open(path, "w") as fh:
        fh.write(SCRIPT)
    wait = TIMEOUT - 5
    start = time.time()
    try:
        proc = subprocess.run([sys.executable, path], env=command_env(os.environ), cwd=directory,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=wait)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
        printed = "cannot pickle '_thread.lock' object" in stderr
        raise RuntimeError(
            "no batch and no error after %d s: the main process waits forever%s" % (
                wait, "; only the worker's stderr says \"TypeError: cannot pickle "
                "'_thread.lock' object\"" if printed else ""))
    finally:
        import shutil
        shutil.rmtree(directory, ignore_errors=True)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("OUTCOME ")]
    if not lines:
        raise RuntimeError("the script printed no outcome (exit code %s): %s" % (
            proc.returncode, proc.stderr.strip().splitlines()[-1:]))
    outcome = json.loads(lines[-1][len("OUTCOME "):])
    if outcome["ok"]:
        return "the DataLoader yielded %d samples" % outcome["batches"]
    named = [l.strip() for l in outcome["message"].splitlines() if "batch['lock']" in l]
    if not named:
        raise RuntimeError("the main process raised %s after %.1f s: %s" % (
            outcome["type"], outcome["seconds"], outcome["message"].strip().splitlines()[0]))
    return "after %.1f s (%.1f s in all) the main process raises %s naming %s" % (
        outcome["seconds"], time.time() - start, outcome["type"], named[0])
