"""Patch ``torch.spawn_errors`` on real ``torch.multiprocessing.spawn`` (torch 1.9.1 and 2.13).

A spawn child that cannot unpickle its arguments (a class defined under the main guard) dies
before ``fn`` runs; ``ProcessExitedException`` then says only "process 0 terminated with exit
code 1". With the patch it names the child's error, where the class is defined and the fix.
In this process: the wrapped ``__init__`` keeps its signature and revert restores it.
"""
import inspect
import json
import subprocess
import sys
import textwrap

from torch.multiprocessing.spawn import ProcessExitedException

import mpcompat
from mpcompat import patching
from testenv import child_env, missing_in_main

PATCH = "torch.spawn_errors"
RESULT = "RESULT "

SCRIPT = '''
import json, sys, traceback
import mpcompat
import torch.multiprocessing as mp

def fn(index, config):
    pass

def report(exc):
    print("RESULT " + json.dumps({
        "type": type(exc).__name__, "exit_code": getattr(exc, "exit_code", None),
        "message": "".join(traceback.format_exception_only(type(exc), exc))}), flush=True)

if __name__ == "__main__":
    class Config(object):
        lr = 0.1

    try:
        mp.spawn(fn, args=(Config(),), nprocs=1)
    except Exception as exc:
        report(exc)
    try:  # join=False: the caller joins
        mp.spawn(fn, args=(Config(),), nprocs=1, join=False).join()
    except Exception as exc:
        report(exc)
'''


def run(tmp_path, **env):
    path = tmp_path / "spawned.py"
    path.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(path)], env=child_env(**env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=150, cwd=str(tmp_path))
    results = [json.loads(l[len(RESULT):]) for l in proc.stdout.splitlines()
               if l.startswith(RESULT)]
    assert len(results) == 2 and proc.returncode == 0, proc.stdout + proc.stderr
    return results, str(path)


def flat(text):
    return " ".join(text.split())


def test_child_dying_at_start_up_is_named(tmp_path):
    results, script = run(tmp_path)
    for result in results:
        text = flat(result["message"])
        assert result["type"] == "ProcessExitedException" and result["exit_code"] == 1
        assert text.startswith("torch.multiprocessing.spawn.ProcessExitedException: process 0 "
                               "terminated with exit code 1 mpcompat: torch.multiprocessing."
                               "spawn process (pid ")
        assert "failed while starting: AttributeError: " + missing_in_main("Config") in text
        assert "class Config is defined inside `if __name__ == \"__main__\":` of %s, line " \
               "15" % script in text
        assert "Move the class Config to module level" in text
        assert text.count("failed while starting") == 1


def test_child_dying_at_start_up_before(tmp_path):
    results, _ = run(tmp_path, MPCOMPAT_DISABLED_PATCHES=PATCH)
    for result in results:
        assert result["type"] == "ProcessExitedException" and result["exit_code"] == 1
        assert result["message"].strip() == ("torch.multiprocessing.spawn."
                                             "ProcessExitedException: process 0 terminated "
                                             "with exit code 1")


def test_wrapped_init_keeps_its_signature_and_revert_restores_it(restore_mpcompat):
    cls = ProcessExitedException
    patching.apply_deferred()  # what spawn() would do first
    wrapper = cls.__dict__["__init__"]
    original = wrapper.__wrapped__
    assert inspect.signature(wrapper) == inspect.signature(original)
    exc = cls("process 0 terminated with exit code 1", error_index=0, error_pid=2 ** 22 + 7,
              exit_code=1)
    # torch's message first (below 3.11 a note mpcompat adds follows it in str())
    assert str(exc).split("\n")[0] == "process 0 terminated with exit code 1"
    assert exc.exit_code == 1
    mpcompat.deactivate()
    assert cls.__dict__["__init__"] is original
    mpcompat.activate(disabled_patches=[PATCH])
    assert cls.__dict__["__init__"] is original
    mpcompat.activate()
    patching.apply_deferred()
    assert cls.__dict__["__init__"].__wrapped__ is original
