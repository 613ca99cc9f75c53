"""Patch ``torch.dataloader_workers`` on real DataLoaders (torch 1.9.1 and 2.13).

- A batch that cannot be pickled raises in the main process within seconds, naming the path
  (``batch['lock']``), under fork, spawn and forkserver; without the patch the main process
  waits forever (bounded here by the DataLoader's own ``timeout``).
- A spawn/forkserver worker that dies starting up (its Dataset class is defined under the main
  guard) is named in the main process's "exited unexpectedly" error, with the fix.
- In this process: ``_worker_loop`` is a plain function pickled by reference, with the
  original's name and signature; revert restores the originals (identity).

Every DataLoader runs in a script in a child interpreter, bounded by a timeout.
"""
import inspect
import json
import pickle
import subprocess
import sys
import textwrap

import torch.utils.data.dataloader as dataloader
from torch._C import _error_if_any_worker_fails as original_check
from torch.utils.data._utils import signal_handling, worker

import mpcompat
from mpcompat import patching
from testenv import child_env, missing_in_main

PATCH = "torch.dataloader_workers"
MARK = "_mpcompat_dataloader_workers"
RESULT = "RESULT "

BATCH_SCRIPT = '''
import json, sys, time, traceback
import mpcompat
import torch.utils.data as data
import dataloader_helpers as helpers

# Failed iterators are kept until the interpreter exits, which terminates their workers at
# once: shutting them down earlier waits 5 s per worker on torch 2.13.
KEPT = []

def attempt(method, batch_size, timeout):
    # batch_size -1: no batching, a dataset that raises an error of a local class
    extra = {"batch_size": None} if batch_size <= 0 else {
        "batch_size": batch_size, "collate_fn": helpers.as_list}
    dataset = helpers.LockSamples() if batch_size >= 0 else helpers.RaisesLocalError()
    loader = data.DataLoader(dataset, num_workers=2, timeout=timeout,
                             multiprocessing_context=method, **extra)
    start = time.time()
    batches = iter(loader)
    KEPT.append(batches)
    try:
        got = [batch for batch in batches]
        result = {"type": None, "message": repr(got)}
    except Exception as exc:
        result = {"type": type(exc).__name__,
                  "message": "".join(traceback.format_exception_only(type(exc), exc))}
    result["seconds"] = time.time() - start
    result["spec"] = "%s:%d" % (method, batch_size)
    print("RESULT " + json.dumps(result), flush=True)

if __name__ == "__main__":
    for spec in sys.argv[1:]:
        method, batch_size, timeout = spec.split(":")
        attempt(method, int(batch_size), int(timeout))
'''

GUARD_SCRIPT = '''
import json, sys, traceback
import mpcompat
import torch.utils.data as data

if __name__ == "__main__":
    class MyDS(data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, index):
            return index

    for method in sys.argv[1:]:
        loader = data.DataLoader(MyDS(), batch_size=None, num_workers=1,
                                 multiprocessing_context=method)
        try:
            list(loader)
            result = {"type": None, "message": ""}
        except Exception as exc:
            result = {"type": type(exc).__name__,
                      "message": "".join(traceback.format_exception_only(type(exc), exc))}
        print("RESULT " + json.dumps(result), flush=True)
'''


def run_script(tmp_path, name, source, args, timeout, **env):
    """Run ``source`` as ``tmp_path/name`` with this interpreter; return (results, process)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    proc = subprocess.run([sys.executable, str(path)] + list(args), env=child_env(**env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, cwd=str(tmp_path))
    results = [json.loads(line[len(RESULT):]) for line in proc.stdout.splitlines()
               if line.startswith(RESULT)]
    assert results, proc.stdout + proc.stderr
    return results, proc


def flat(text):
    return " ".join(text.split())


# --- an unpicklable batch ---------------------------------------------------------------------

def test_unpicklable_batch_raises_in_the_main_process(tmp_path):
    specs = ["fork:0:0", "spawn:0:0", "forkserver:0:0", "fork:2:0", "fork:-1:0"]
    results, proc = run_script(tmp_path, "batches.py", BATCH_SCRIPT, specs, timeout=150)
    assert [r["spec"] for r in results] == ["fork:0", "spawn:0", "forkserver:0", "fork:2",
                                            "fork:-1"]
    local_error = flat(results.pop()["message"])
    for result in results:
        text = flat(result["message"])
        assert result["type"] == "TypeError", result
        assert result["seconds"] < 30, result
        assert text.startswith("TypeError: Caught TypeError in DataLoader worker process ")
        assert "cannot pickle '_thread.lock' object" in text
        assert "could not send batch " in text and "to the main process" in text
        assert text.count("mpcompat: ") == 1, text  # the queue's own pickling note is left out
        assert "hint: Locks" in text
    for result in results[:3]:  # batch_size=None: the sample is the batch
        assert "batch['lock'] (_thread.lock object)" in flat(result["message"]), result
    batched = flat(results[3]["message"])
    assert "batch[0]['lock'] (_thread.lock object)" in batched
    assert "batch[1]['lock'] (_thread.lock object)" in batched
    assert "cannot pickle" not in proc.stderr, proc.stderr  # no feeder thread printed it
    # An error the dataset raised, whose class cannot be pickled, arrives as its text.
    assert local_error.startswith("RuntimeError: Caught RuntimeError in DataLoader worker "
                                  "process 0. Original RuntimeError: mpcompat: the worker's "
                                  "error, RaisesLocalError.__getitem__.<locals>.ShapeError, "
                                  "could not be sent to the main process")
    assert "ShapeError: sample 0 has the wrong shape" in local_error


def test_unpicklable_batch_before_waits_forever(tmp_path):
    # Stock torch: the worker's feeder thread prints the error and the batch never comes;
    # the DataLoader's own timeout ends the wait here.
    for env in ({"MPCOMPAT_DISABLE": "1"}, {"MPCOMPAT_DISABLED_PATCHES": PATCH}):
        results, proc = run_script(tmp_path, "batches.py", BATCH_SCRIPT, ["fork:0:2"],
                                   timeout=60, **env)
        assert results[0]["type"] == "RuntimeError", env
        assert "DataLoader timed out after 2 seconds" in results[0]["message"], env
        assert "cannot pickle '_thread.lock' object" in proc.stderr, env
        assert "batch['lock']" not in proc.stderr, env


# --- a worker that dies starting up -----------------------------------------------------------

def test_worker_dying_at_start_up_is_named(tmp_path):
    results, _ = run_script(tmp_path, "guard.py", GUARD_SCRIPT, ["spawn", "forkserver"],
                            timeout=120)
    script = str(tmp_path / "guard.py")
    for result in results:
        text = flat(result["message"])
        assert result["type"] == "RuntimeError"
        assert text.startswith("RuntimeError: DataLoader worker (pid(s) ")
        assert "exited unexpectedly mpcompat: DataLoader worker (pid " in text
        assert missing_in_main("MyDS") in text
        assert "class MyDS is defined inside `if __name__ == \"__main__\":` of %s, line 7" % (
            script) in text
        assert "Move the class MyDS to module level" in text
        assert text.count("failed while starting:") == 1


def test_worker_dying_at_start_up_before(tmp_path):
    results, _ = run_script(tmp_path, "guard.py", GUARD_SCRIPT, ["spawn"], timeout=90,
                            MPCOMPAT_DISABLE="1")
    message = results[0]["message"]
    assert results[0]["type"] == "RuntimeError"
    assert message.startswith("RuntimeError: DataLoader worker (pid(s) ")
    assert message.rstrip().endswith("exited unexpectedly") and "MyDS" not in message


# --- in this process: how the patch is applied and reverted -----------------------------------

def originals():
    patching.apply_deferred()  # what a DataLoader's iter() and its worker would do first
    loop = worker._worker_loop
    method = dataloader._MultiProcessingDataLoaderIter.__dict__["_try_get_data"]
    return (getattr(loop, "__wrapped__", loop), getattr(method, "__wrapped__", method))


def test_applied_worker_loop_pickles_by_reference_with_the_original_signature():
    original_loop, original_method = originals()
    loop = worker._worker_loop
    assert getattr(loop, MARK, False) and loop is not original_loop
    assert type(loop) is type(original_loop)  # a plain function, not a proxy
    assert (loop.__module__, loop.__qualname__) == (original_loop.__module__,
                                                     original_loop.__qualname__)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(loop, protocol)) is loop
    assert inspect.signature(loop) == inspect.signature(original_loop)
    method = dataloader._MultiProcessingDataLoaderIter.__dict__["_try_get_data"]
    assert method is not original_method and method.__wrapped__ is original_method
    assert inspect.signature(method) == inspect.signature(original_method)
    assert inspect.signature(dataloader._MultiProcessingDataLoaderIter._try_get_data) == \
        inspect.signature(original_method)


def test_revert_restores_the_originals(restore_mpcompat):
    original_loop, original_method = originals()
    cls = dataloader._MultiProcessingDataLoaderIter
    check = signal_handling._error_if_any_worker_fails
    assert type(check) is not type(original_check) and check.__wrapped__ is original_check
    mpcompat.deactivate()
    assert worker._worker_loop is original_loop
    assert cls.__dict__["_try_get_data"] is original_method
    assert signal_handling._error_if_any_worker_fails is original_check  # torch's, in C
    mpcompat.activate(disabled_patches=[PATCH])
    assert worker._worker_loop is original_loop
    mpcompat.activate()
    patching.apply_deferred()
    assert getattr(worker._worker_loop, MARK, False)
    assert worker._worker_loop.__wrapped__ is original_loop
    assert cls.__dict__["_try_get_data"].__wrapped__ is original_method
    assert signal_handling._error_if_any_worker_fails.__wrapped__ is original_check
    # Someone else's replacement is left alone by revert.
    mine = cls.__dict__["_try_get_data"]

    def theirs(self, timeout=0):
        return original_method(self, timeout)
    cls._try_get_data = theirs
    try:
        mpcompat.deactivate()
        assert cls.__dict__["_try_get_data"] is theirs
    finally:
        cls._try_get_data = original_method
    assert mine.__wrapped__ is original_method
