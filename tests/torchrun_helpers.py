"""Helpers for the torchrun tests: ``python -m torch.distributed.run`` under ``mpcompat run``
(mpcompat active in the agent and in every rank, as an installed mpcompat is), bounded by a
timeout that kills the whole process tree."""
import glob
import json
import os
import re
import subprocess
import sys

from pool_workers_helpers import finish
from testenv import TESTS, child_env

SCRIPTS = os.path.join(TESTS, "torchrun", "scripts")
# The agent's address for its ranks: its host name by default, which a chroot (.ci/sid) may not
# resolve. torch 1.9 has no such option (nor needs it).
LOCAL_ADDR = [] if __import__("torch").__version__.startswith("1.") else [
    "--local_addr=127.0.0.1"]


def torchrun(tmp_path, script, *torchrun_args, **kwargs):
    """Run ``scripts/<script>`` under torchrun (2 ranks on this node unless ``torchrun_args``
    say otherwise), in ``tmp_path``, logs in ``tmp_path/logs``. kwargs: ``timeout`` (s, default
    180), ``script_args``, ``prefix`` (a command that runs the rest: ``unshare ...``) and
    environment overrides. Returns the CompletedProcess; a timeout raises (the tree is killed
    first)."""
    timeout = kwargs.pop("timeout", 180)
    return finish(start_torchrun(tmp_path, script, *torchrun_args, **kwargs), timeout)


def start_torchrun(tmp_path, script, *torchrun_args, **kwargs):
    """Start what :func:`torchrun` runs; return the Popen (in a session of its own)."""
    script_args = [str(a) for a in kwargs.pop("script_args", ())]
    prefix = list(kwargs.pop("prefix", ()))
    kwargs.setdefault("OMP_NUM_THREADS", "1")
    args = list(torchrun_args) or ["--standalone", "--nproc_per_node=2"]
    command = prefix + [sys.executable, "-m", "mpcompat", "run", "--", sys.executable, "-m",
               "torch.distributed.run"] + LOCAL_ADDR + args + [
        "--log_dir=%s" % os.path.join(str(tmp_path), "logs"),
        os.path.join(SCRIPTS, script)] + script_args
    return subprocess.Popen(command, env=child_env(**kwargs), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, start_new_session=True)


def free_port():
    """A TCP port free on 127.0.0.1 right now."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def root_cause(proc):
    """The summary's root-cause section (torch 1.9: up to "Other Failures"), '' if none."""
    text = proc.stderr
    start = text.find("Root Cause")
    if start < 0:
        return ""
    end = text.find("Other Failures", start)
    return text[start:end if end > 0 else len(text)]


def summary(proc):
    """The failures torchrun's summary lists (torch 2: "Failures:" then "Root Cause", torch 1.9:
    "Root Cause:" then "Other Failures:"), '' if none."""
    starts = [i for i in (proc.stderr.find("Failures:"), proc.stderr.find("Root Cause"))
              if i >= 0]
    return proc.stderr[min(starts):] if starts else ""


def failure_blocks(proc):
    """``{rank: the lines the summary shows as its error}`` (torch 2: from "traceback :", torch
    1.9: from "msg:"; trailing blank lines left out) and the rank of the root cause."""
    blocks, root, rank, lines, section = {}, None, None, None, None
    for line in summary(proc).splitlines() + ["="]:
        if re.match(r"\[\d+\]:$", line) or re.match(r"[-=*]+$", line):
            if rank is not None:
                while lines and not lines[-1].strip():
                    lines.pop()
                blocks[rank] = lines
                if section == "root":
                    root = rank
            rank, lines = None, None
        if line.startswith("Root Cause"):
            section = "root"
        elif line.startswith(("Failures:", "Other Failures:")):
            section = "other"
        found = re.match(r"\s+rank\s*: (\d+) \(local_rank", line)
        if found:
            rank = int(found.group(1))
        elif rank is not None and lines is None and re.match(r"\s+(traceback :|msg:)", line):
            lines = [line]
        elif lines is not None:
            lines.append(line)
    return blocks, root


def error_files(tmp_path):
    """``{local_rank: the JSON of its error file}`` for the error files of the first attempt."""
    found = {}
    for path in glob.glob(os.path.join(str(tmp_path), "logs", "**", "error.json"),
                          recursive=True):
        rank = int(os.path.basename(os.path.dirname(path)))
        with open(path) as stream:
            found[rank] = json.load(stream)
    return found
