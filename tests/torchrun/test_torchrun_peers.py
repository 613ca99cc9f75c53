"""Every cause said once: in torchrun's summary, a rank that failed only because another one
died is one line, as torch alone prints it, and the root cause is the rank that died first,
with its traceback (the ``torch.elastic_failures`` patch, in the agent).

One torchrun, four gloo ranks (tests/torchrun/scripts/peer_raises.py): rank 1 raises, ranks 0
and 2 wait for it in a barrier and fail of "Connection closed by peer" (each writes its error
file, the ``torch.elastic_errors`` patch), rank 3 sleeps until the agent stops it (torch 2.x
lists it, "Signal 15 (SIGTERM)"; torch 1.9 does not)."""
import pytest

from testenv import child_env, run_python
from torchrun_helpers import error_files, failure_blocks, summary, torchrun


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("peers")
    proc = torchrun(tmp_path, "peer_raises.py", "--standalone", "--nproc_per_node=4")
    return proc, error_files(tmp_path)


def test_the_root_cause_is_the_rank_that_raised_with_its_traceback(four_ranks):
    proc, _ = four_ranks
    blocks, root = failure_blocks(proc)
    assert root == 1, summary(proc) or proc.stderr[-3000:]
    assert "rank 1 cannot read its shard" in "\n".join(blocks[1])
    # the root cause's is the summary's only traceback
    assert summary(proc).count("Traceback (most recent call last)") == 1, summary(proc)


def test_the_ranks_that_failed_after_it_are_one_line_each(four_ranks):
    proc, files = four_ranks
    blocks, root = failure_blocks(proc)
    others = {rank: lines for rank, lines in blocks.items() if rank != root}
    if not others:
        # torch 2.2-2.12's agent lists only the ranks that failed before it stopped the rest
        # (SubprocessContext._poll); 1.9 and 2.13+ also those that fail as they are stopped.
        from torch.distributed.elastic.multiprocessing.api import SubprocessContext
        assert not hasattr(SubprocessContext, "_capture_process_failures"), summary(proc)
        assert "<NO_OTHER_FAILURES>" in summary(proc), summary(proc)
        return
    assert set(others) & {0, 2}, summary(proc)  # the ranks in the barrier are listed
    for rank, lines in others.items():
        assert len(lines) == 1, summary(proc)
        if rank in files:  # failed in the barrier: its error's one line, and mpcompat's word
            assert "Connection closed by peer" in lines[0] or \
                "Connection reset by peer" in lines[0], lines
            assert lines[0].endswith("(mpcompat: a peer ended first; see the root cause)") or \
                lines[0].endswith('(mpcompat: a peer ended first; see the root cause)"'), lines
            assert "pair.cc" not in lines[0], lines
            # its error file keeps the whole traceback
            assert "dist.barrier()" in str(files[rank]["message"]["extraInfo"]["py_callstack"])
        else:  # stopped by the agent before it failed itself: torch's line alone
            assert "Signal 15 (SIGTERM) received by PID" in lines[0], lines


GLOO_2 = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
          "Connection closed by peer [127.0.0.1]:6861. This is typically caused by a remote "
          "worker crashing. Check the logs of the remote worker before reporting an error.")


def test_what_says_a_peer_is_gone():
    from mpcompat.patches.torch_elastic_failures import after_a_peer, one_line
    assert one_line({"message": GLOO_2}) == (
        "RuntimeError: Connection closed by peer [127.0.0.1]:6861 (mpcompat: a peer ended "
        "first; see the root cause)")
    assert one_line("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
                    "Connection reset by peer [127.0.0.1]:2").startswith(
        "RuntimeError: Connection reset by peer [127.0.0.1]:2 (mpcompat")
    nccl = {"message": "DistBackendError: NCCL error in: x.cpp:19, remote process exited or "
                       "there was a network error, NCCL version 2.21.5\nncclRemoteError: ..."}
    assert after_a_peer(nccl) and one_line(nccl).startswith("DistBackendError: NCCL error in")
    # a socket of the user's, a rank's own error, torch's placeholder: the rank's own cause
    for message in ({"message": "ConnectionResetError: [Errno 104] Connection reset by peer"},
                    {"message": "ValueError: rank 1 cannot read its shard"},
                    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
                    {"message": {"not": "text"}}):
        assert not after_a_peer(message)


SUMMARY = """
import json, os, sys, tempfile
import torch.distributed.elastic.multiprocessing.errors as errors
from mpcompat.patches import torch_elastic_failures as patch
patch.apply(errors)
folder = tempfile.mkdtemp()
def failure(rank, message, timestamp):
    path = os.path.join(folder, str(rank))
    with open(path, "w") as stream:
        json.dump({"message": {"message": message, "extraInfo": {
            "py_callstack": "Traceback (rank %d)\\n" % rank + message, "timestamp": timestamp}}},
            stream)
    return errors.ProcessFailure(rank, 100 + rank, 1, path)
PEER = "RuntimeError: [../pair.cc:598] Connection closed by peer [127.0.0.1]:1"
failures = {0: failure(0, PEER, "2"), 1: failure(1, "ValueError: x", "1"),
            2: failure(2, PEER, "2")}
print(errors.ChildFailedError("all", failures))
print(errors.ChildFailedError("peers", {0: failures[0], 2: failures[2]}))
assert failures[0].message["message"] == PEER  # what torch's agent keeps is untouched
patch.revert(errors)
print(errors.ChildFailedError("reverted", {0: failures[0], 2: failures[2]}))
"""


def test_each_rank_but_the_root_cause_that_failed_after_a_peer_is_one_line():
    """ChildFailedError in-process, error files made up: where every rank failed after a peer
    (the one that died first is on another node), the root cause keeps its traceback."""
    proc = run_python(SUMMARY, env=child_env(MPCOMPAT_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr
    every, peers, reverted = proc.stdout.split("FAILED")[1:]
    short = "RuntimeError: Connection closed by peer [127.0.0.1]:1 (mpcompat: a peer ended first"
    assert every.count(short) == 2 and "Traceback (rank 1)" in every, every
    assert "Traceback (rank 0)" not in every and "Traceback (rank 2)" not in every
    assert peers.count(short) == 1 and "Traceback (rank 0)" in peers, peers
    assert short not in reverted and "Traceback (rank 2)" in reverted, reverted
