"""torchrun's failure summary holds mpcompat's cause without ``@record``: each rank that dies of
an uncaught exception writes torch's error file itself (the ``torch.elastic_errors`` patch).

One torchrun, three gloo ranks that all fail (tests/torchrun/scripts/errors.py): rank 0 run by
``@record``, rank 1 plain (its DataLoader worker SIGKILLed), rank 2 with an excepthook of its
own that displaces torch's and mpcompat's."""
import json
import os
import subprocess
import sys
import time

import pytest

from testenv import NEW_PICKLE_MESSAGES, child_env
from torchrun_helpers import error_files, failure_blocks, root_cause, summary, torchrun

TORCH_1 = __import__("torch").__version__.startswith("1.")


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("errors")
    proc = torchrun(tmp_path, "errors.py", "--standalone", "--nproc_per_node=3")
    return proc, error_files(tmp_path)


def test_every_rank_cause_reaches_the_summary(three_ranks):
    proc, _ = three_ranks
    assert proc.returncode != 0, proc.stderr[-3000:]
    text = summary(proc)
    assert "Root Cause" in root_cause(proc), proc.stderr[-3000:]
    assert "To enable traceback" not in text
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext
    if not TORCH_1 and not hasattr(SubprocessContext, "_capture_process_failures"):
        # torch 2.2-2.12's agent lists only the ranks that failed before it stopped the rest:
        # each rank it lists carries its cause.
        blocks, _ = failure_blocks(proc)
        for rank, lines in blocks.items():
            said = "\n".join(lines)
            assert ("killed by signal 9 (SIGKILL)" if rank == 1 else "dataset.fn") in said, text
        return
    # Rank 1 (no @record): the SIGKILLed worker, as mpcompat measured it.
    assert "mpcompat: DataLoader worker (pid " in text and "killed by signal 9 (SIGKILL)" in text
    # Ranks 0 (@record) and 2 (its own excepthook): the lambda named, with the fix.
    assert text.count("dataset.fn") >= 2, text


def test_the_rank_files_are_records_own_or_carry_the_cause_in_message(three_ranks):
    _, files = three_ranks
    assert sorted(files) == [0, 1, 2]
    messages = {rank: data["message"]["message"] for rank, data in files.items()}
    assert messages[1].startswith("RuntimeError: DataLoader worker (pid(s) ")
    assert "\nmpcompat: DataLoader worker (pid " in messages[1]
    # AttributeError up to 3.13, PicklingError from 3.14
    assert messages[2].split(": ", 1)[1].startswith("Can't pickle local object")
    assert "\nmpcompat: DataLoader worker process 0 could not be started" in messages[2]
    for rank in (1, 2):
        callstack = files[rank]["message"]["extraInfo"]["py_callstack"]
        assert "scripts/errors.py" in callstack and "mpcompat" + os.sep not in callstack
    # Rank 0's file is the one @record wrote: ErrorHandler's own message and call stack (a list
    # on torch 1.9), which holds mpcompat's note only where str(exc) does (Python < 3.11).
    record_message = files[0]["message"]["message"]
    assert record_message.split(": ", 1)[1].startswith("Can't pickle local object")
    assert ("mpcompat:" in record_message) == (sys.version_info < (3, 11))
    assert isinstance(files[0]["message"]["extraInfo"]["py_callstack"], list) == TORCH_1


def test_the_excepthooks_still_run(three_ranks):
    proc, _ = three_ranks
    assert "USER HOOK rank 2: %s" % ("PicklingError" if NEW_PICKLE_MESSAGES
                                      else "AttributeError") in proc.stderr
    if not TORCH_1:  # torch 2's c10d excepthook prefixes the traceback it prints with the rank
        assert "[rank1]: RuntimeError: DataLoader worker (pid(s) " in proc.stderr


RAISE = """
import os, sys, types, multiprocessing
if __name__ == "__main__":
    if sys.argv[1] == "child":
        ghost = sys.modules["ghost"] = types.ModuleType("ghost")  # not importable in a child
        exec("def target(): pass", ghost.__dict__)
        p = multiprocessing.get_context("spawn").Process(target=ghost.target)
        p.start(); p.join()
        print("CHILD EXIT", p.exitcode, flush=True)
    raise RuntimeError(sys.argv[2])
"""


def _raise(tmp_path, *args, **env):
    """Run RAISE under ``mpcompat run`` as a rank would be (the error file in ``tmp_path``);
    return the CompletedProcess and the file's JSON."""
    path, script = str(tmp_path / "error.json"), tmp_path / "raise.py"
    script.write_text(RAISE)
    proc = subprocess.run(
        [sys.executable, "-m", "mpcompat", "run", "--", sys.executable, str(script)] + list(args),
        env=child_env(TORCHELASTIC_ERROR_FILE=path, **env), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    with open(path) as stream:
        return proc, json.load(stream)


def test_the_file_holds_the_error_and_its_date(tmp_path):
    before = int(time.time())
    proc, data = _raise(tmp_path, "plain", "boom")
    assert data["message"]["message"] == "RuntimeError: boom"
    assert before <= int(data["message"]["extraInfo"]["timestamp"]) <= int(time.time())
    assert 'raise RuntimeError(sys.argv[2])' in data["message"]["extraInfo"]["py_callstack"]


def test_an_existing_file_is_kept_and_children_write_none(tmp_path):
    (tmp_path / "error.json").write_text('{"message": "written first"}')
    proc, data = _raise(tmp_path, "plain", "boom")
    assert data == {"message": "written first"}
    assert "RuntimeError: boom" in proc.stderr  # the previous hook printed it
    os.remove(str(tmp_path / "error.json"))
    # A spawn child inherits the variable: its start-up failure (which reaches its excepthook
    # without the bootstrap patch) is not the rank's.
    proc, data = _raise(tmp_path, "child", "the rank's own",
                        MPCOMPAT_DISABLED_PATCHES="multiprocessing.bootstrap_notes")
    assert "CHILD EXIT 1" in proc.stdout, proc.stderr
    assert data["message"]["message"] == "RuntimeError: the rank's own"
