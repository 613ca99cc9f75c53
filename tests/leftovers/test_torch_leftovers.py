"""Patch ``torch.leftovers``: the next run's error names what a killed run left. Real orphans
(``earlier_run.py``), real torch: ``init_process_group`` and torchrun's agent on a port an
orphan's TCPStore holds; a CUDA out of memory error (on this CPU-only machine, raised by the
real ``torch.cuda.OutOfMemoryError`` class, as torch's C++ makes it) with an orphan holding a
stand-in device file."""
import os
import signal
import subprocess
import sys
import textwrap

import torch

from leftover_runs import leave
from testenv import child_env

TORCH_1 = torch.__version__.startswith("1.")
INIT = textwrap.dedent("""
    import datetime, os, sys
    import torch.distributed as dist
    print("mpcompat.patches.torch_leftovers" in sys.modules)  # first_use: not at import
    port = sys.argv[1]
    if sys.argv[2] == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        url = "env://"
    else:
        url = "tcp://127.0.0.1:%s" % port
    dist.init_process_group("gloo", init_method=url, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    dist.destroy_process_group()
    print(sorted(m for m in sys.modules
                 if m == "mpcompat.diagnose.leftovers" or m.split(".")[0] == "wrapt"))
""")
AGENT_SCRIPT = "print('a rank ran')\n"


def _start(args, cwd=None):
    """``args`` under ``mpcompat run`` (mpcompat active as installed), output captured."""
    return subprocess.Popen([sys.executable, "-m", "mpcompat", "run", "--", sys.executable] + args,
                            env=child_env(OMP_NUM_THREADS="1"), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, start_new_session=True)


def _finish(proc, timeout=180):
    try:
        proc.communicate(timeout=timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
    out, err = proc.communicate()
    return proc.returncode, out, err


def _assert_names(err, orphan, error_line):
    """The error, then mpcompat's note naming ``orphan``, with no frame of mpcompat."""
    assert error_line in err, err
    note = err[err.rindex(error_line):].split("\n", 1)[1]  # torch 1.9's agent logs it first
    assert note.startswith("mpcompat: port %d is held by a process left by an earlier run that "
                           "has exited:\n  pid %d, started " % (orphan.port, orphan.pid)), err
    assert "an orphan: the run that started it (pid %d, the leader of its process group) has "\
           "exited and pid " % orphan.run in note, err  # pid 1, or a subreaper above the test
    assert " adopted it: %s\n" % orphan.command in note, err
    assert "Stop it (kill %d)" % orphan.pid in note
    assert err.count("\nmpcompat: port") == 1, err  # the log's JSON has it as "\\n"
    assert "/mpcompat/" not in "".join(line for line in err.splitlines(True)
                                       if line.lstrip().startswith("File ")), err


def test_a_port_held_by_an_orphan_is_named(tmp_path):
    (tmp_path / "rank.py").write_text(AGENT_SCRIPT)
    with leave("tcpstore") as orphan, leave("socket") as free:
        port = str(orphan.port)
        # torch 2.6: RuntimeError; 2.13: DistNetworkError
        error_line = ("RuntimeError: Address already in use" if TORCH_1 else
                      "Error: The server socket has failed to listen on any local network "
                      "address. port: %s," % port)
        runs = [_start(["-c", INIT, port, "tcp"]), _start(["-c", INIT, port, "env"]),
                _start(["-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=1",
                        "--master_addr=127.0.0.1", "--master_port=" + port, "rank.py"],
                       cwd=str(tmp_path))]
        os.kill(free.pid, signal.SIGKILL)  # frees its port: the success path, on a known port
        success = _start(["-c", INIT, str(free.port), "tcp"])
        for proc in runs:
            code, out, err = _finish(proc)
            assert code != 0
            _assert_names(err, orphan, error_line)
        code, out, err = _finish(success)
    assert (code, out) == (0, "False\n[]\n"), err  # leftovers read, wrapt loaded: neither


OOM = textwrap.dedent("""
    import sys
    import torch
    from mpcompat.diagnose import leftovers
    leftovers.DEVICES = sys.argv[1]  # the orphan's stand-in for /dev/nvidia*
    try:
        torch.cuda._lazy_init()  # a CPU build: "Torch not compiled with CUDA enabled"
    except Exception as exc:
        print("lazy_init:", "mpcompat" in str(exc))  # 1.9.1: a CUDA build, no driver
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None:  # torch 1.13+: what the caching allocator raises
        for attempt in range(2):
            try:
                raise oom("CUDA out of memory. Tried to allocate 2.00 GiB")
            except oom as exc:
                print("%d: %s" % (attempt, "\\n".join(getattr(exc, "__notes__", None) or [])))
""")


def test_cuda_oom_names_this_users_orphans_holding_the_gpu(tmp_path):
    device = tmp_path / "nvidia0"
    device.write_bytes(b"")
    with leave("file", str(device)) as orphan:
        code, out, err = _finish(_start(["-c", OOM, str(tmp_path / "nvidia*")]))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "lazy_init: False", out
    if TORCH_1:
        assert len(lines) == 1, out
        return
    assert lines[1].startswith("0: mpcompat: an orphaned process of this user, left by an "
                               "earlier run, holds the GPU open"), out
    assert ("pid %d, started " % orphan.pid) in lines[2] and lines[2].endswith(orphan.command)
    assert "the run that started it (pid %d" % orphan.run in lines[2]
    assert lines[3:] == ["Stop it (kill %d) and run again." % orphan.pid, "1: "], out
