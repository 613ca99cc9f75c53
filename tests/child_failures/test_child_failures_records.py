"""mpcompat.child_failures.channel: a child records why it failed, its parent takes the record,
through a socket the parent owns (nothing on disk).

Real child processes (fork, spawn, forkserver) record; the test process is their parent. Tests
that need a process of their own (a fresh channel, TMPDIR, a faked platform) run a script in a
child interpreter.
"""
import json
import multiprocessing
import multiprocessing.connection
import os
import subprocess
import sys
import time
import types

import pytest

import child_failures_helpers as h
from mpcompat.child_failures import channel
from testenv import child_env, run_python

FIRST_STARTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "startup", "scripts", "first_starts.py")

METHODS = ["fork", "spawn", "forkserver"]


def run_child(method, target, *args):
    """Start ``target(*args)`` in a ``method`` child and wait for it to end, but do not join it
    (join names a plain Process's recorded cause, and takes the record); return the Process."""
    process = multiprocessing.get_context(method).Process(target=target, args=args)
    process.start()
    assert multiprocessing.connection.wait([process.sentinel], 60), "the child hung"
    return process


def finish(*processes):
    for process in processes:
        process.join(60)


@pytest.mark.parametrize("method", METHODS)
def test_a_child_records_and_its_parent_takes_it_once(method):
    process = run_child(method, h.fail_and_record, "unpickling what its parent sent")
    record = channel.take(process.pid)
    assert (record.pid, record.what, record.error, record.notes) == (
        process.pid, "unpickling what its parent sent", "ValueError: the data is gone",
        ["mpcompat: the fix is to bring the data back"])
    assert abs(record.time - time.time()) < 60
    assert channel.take(process.pid) is None  # taken once
    finish(process)
    assert process.exitcode == 3


def test_note_for_names_each_child_and_the_notes_once():
    first = run_child("fork", h.fail_and_record, "starting")
    second = run_child("fork", h.fail_and_record, "starting")
    other = run_child("fork", h.fail_and_record, None, "another cause")
    nothing = run_child("fork", h.pid)  # exits 0 without a record
    note = channel.note_for([first.pid, second.pid, nothing.pid, other.pid],
                                   "Pool worker process")
    assert note == "\n".join([
        "mpcompat: Pool worker process (pid %d) failed while starting: ValueError: the data is "
        "gone" % first.pid,
        "(while starting)",
        "mpcompat: the fix is to bring the data back",
        "Pool worker process (pid %d) failed while starting the same way." % second.pid,
        "",
        "Pool worker process (pid %d) failed while starting: ValueError: another cause"
        % other.pid,
        "mpcompat: the fix is to bring the data back",
    ])
    assert channel.note_for([first.pid, other.pid], "Pool worker process") is None
    finish(first, second, other, nothing)


def test_records_only_in_multiprocessing_children_and_never_raises():
    try:
        raise KeyError("parent")
    except KeyError as exc:
        assert channel.record(exc, what="not a child") is None
    assert channel.take(os.getpid()) is None
    process = run_child("fork", h.record_unprintable)
    record = channel.take(process.pid)
    assert record.error == "Unprintable: <unprintable>" and record.notes == []
    assert channel.take("not a pid") is None
    assert channel.note_for(["x"], "worker") is None
    finish(process)


def test_a_record_from_an_earlier_child_with_the_same_pid_is_dropped_at_start():
    process = run_child("fork", h.fail_and_record, "x")
    # What Process.start does around the start of a new child that gets the same pid.
    channel.listen()
    again = types.SimpleNamespace(pid=process.pid, name="again", _target=None, _config={})
    channel.start_child(again, lambda started: None)
    assert channel.take(process.pid) is None
    finish(process)


PILE = """
import multiprocessing, os, sys, tempfile
import mpcompat
import child_failures_helpers as h
from mpcompat.child_failures import channel

if sys.argv[1] == "elsewhere":
    # The socket-file channel of other Unix systems; the kernel names no sender here (no
    # LOCAL_PEERPID on Linux), so a record's own pid is taken, as on a system without one.
    sys.platform = "darwin"
ctx = multiprocessing.get_context("fork")
children = [ctx.Process(target=h.fail_and_record, args=("starting",)) for _ in range(100)]
for p in children:
    p.start()
for p in children:
    p.join()
print("EXIT CODES", sorted(set(p.exitcode for p in children)))
flag = ctx.Value("i", 0)
with ctx.Pool(2, initializer=h.fail_once, initargs=(flag,)) as pool:  # fails once, recovers
    print("POOL", pool.map(h.double, range(4)), flag.value)
print("KEPT", len(channel._channel.records))
print("FILES", sorted(os.listdir(tempfile.gettempdir())))
print("ENVIRON", [k for k in os.environ if k.startswith("MPCOMPAT") and k != "MPCOMPAT_WARNED"])
"""


@pytest.mark.parametrize("platform", ["linux", "elsewhere"])
def test_failing_children_and_a_pool_that_recovers_leave_nothing_behind(tmp_path, platform):
    result = run_python(PILE, platform, env=child_env(TMPDIR=str(tmp_path)), timeout=120)
    out = result.stdout
    assert "EXIT CODES [3]" in out and "KEPT 0" in out, out + result.stderr
    assert "POOL [0, 2, 4, 6] 1" in out
    files = out.split("FILES ")[1].splitlines()[0]
    if platform == "linux":
        assert files == "[]"   # an abstract socket: no file, even while running
    else:
        assert files.startswith("['mpcompat-")  # the socket file's private directory
    assert os.listdir(str(tmp_path)) == []  # and nothing once the program has ended
    assert "ENVIRON []" in out  # the channel leaves the environment alone
    # The parent named the cause once (all hundred children failed alike).
    assert result.stderr.count("MpcompatWarning: mpcompat: Process 'ForkProcess-") == 1, \
        result.stderr



def test_threads_starting_the_first_children_at_once_start_each_with_its_channel():
    """8 threads start the process's first children at once: each child is started with its
    crash file named and its pid told to the channel (``first_starts.py``). A thread used to
    find the channel being opened by another and start its child without it (7 of 8 children,
    every time), or to find the standard library's ``start`` between a first-use stub taken out
    and the patch put on, or a stub whose first use was done while another thread still applied
    the patches (1 child of 8 in 9 of 30 processes). Repeated in 8 fresh processes;
    ``tests/startup`` runs it where the wheel is installed (no patch manager)."""
    for run in range(8):
        proc = subprocess.run([sys.executable, FIRST_STARTS], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        known, codes = json.loads(proc.stdout.splitlines()[-1])
        assert known == [True] * 8 and codes == [3] * 8, (run, known, codes, proc.stderr)
