"""mpcompat.workers.child_failures: a child records why it failed, its parent takes the record.

Real child processes (fork, spawn, forkserver) record; the test process is their parent.
Tests that need a directory of their own run in a child interpreter with TMPDIR set.
"""
import json
import multiprocessing
import os
import stat
import subprocess
import sys
import time

import pytest

import child_failures_helpers as h
from mpcompat.workers import child_failures
from testenv import child_env, run_python

METHODS = ["fork", "spawn", "forkserver"]


def run_child(method, target, *args):
    """Start ``target(*args)`` in a ``method`` child, wait for it; return the Process."""
    process = multiprocessing.get_context(method).Process(target=target, args=args)
    process.start()
    process.join(60)
    assert process.exitcode is not None, "the child hung"
    return process


def record_file(pid):
    return os.path.join(child_failures._directory(create=False), "%d.json" % pid)


@pytest.mark.parametrize("method", METHODS)
def test_a_child_records_and_its_parent_takes_it_once(method):
    before = time.time()
    process = run_child(method, h.fail_and_record, "unpickling what its parent sent")
    assert process.exitcode == 3
    directory = child_failures._directory(create=False)
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    assert os.lstat(directory).st_uid == os.getuid()
    record = child_failures.take(process.pid)
    assert record == {
        "pid": process.pid, "error": "ValueError: the data is gone",
        "notes": ["mpcompat: the fix is to bring the data back"],
        "what": "unpickling what its parent sent", "time": record["time"]}
    assert before <= record["time"] <= time.time()
    assert child_failures.take(process.pid) is None  # taken: deleted
    assert not os.path.exists(record_file(process.pid))


def test_note_for_names_each_child_and_the_notes_once():
    first = run_child("fork", h.fail_and_record, "starting")
    second = run_child("fork", h.fail_and_record, "starting")
    other = run_child("fork", h.fail_and_record, None, "another cause")
    nothing = run_child("fork", h.pid)  # exits 0 without a record
    note = child_failures.note_for([first.pid, second.pid, nothing.pid, other.pid],
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
    assert child_failures.note_for([first.pid, other.pid], "Pool worker process") is None


def test_records_only_in_multiprocessing_children_and_never_raises():
    try:
        raise KeyError("parent")
    except KeyError as exc:
        child_failures.record(exc, what="not a child")
    assert child_failures.take(os.getpid()) is None
    process = run_child("fork", h.record_unprintable)
    assert process.exitcode == 4
    record = child_failures.take(process.pid)
    assert record["error"] == "Unprintable: <unprintable>" and record["notes"] == []
    assert child_failures.take("not a pid") is None
    assert child_failures.note_for(["x"], "worker") is None


STALE = """
import multiprocessing, sys
import child_failures_helpers as h
p = multiprocessing.get_context("fork").Process(target=h.fail_and_record, args=("x",))
p.start(); p.join()
print(p.pid)
"""


def test_a_record_of_another_parent_or_an_earlier_process_is_not_taken():
    # A child of another process (as a child of an earlier process with this pid would be).
    result = run_python(STALE, timeout=60)
    pid = int(result.stdout.split()[-1])
    assert os.path.exists(record_file(pid))
    assert child_failures.take(pid) is None
    assert not os.path.exists(record_file(pid))  # a stale record is deleted
    # A record naming this process as parent, with another start time of the parent (this
    # pid, earlier), or older than a day, is stale as well.
    for change in ({"parent_start": 1}, {"time": time.time() - 3 * 86400}):
        process = run_child("fork", h.fail_and_record, "x")
        path = record_file(process.pid)
        with open(path) as fh:
            data = json.load(fh)
        assert data["parent"] == os.getpid()
        data.update(change)
        with open(path, "w") as fh:
            json.dump(data, fh)
        assert child_failures.take(process.pid) is None
        assert not os.path.exists(path)


OWN_DIR = """
import multiprocessing, os, sys, time, tempfile
import child_failures_helpers as h
from mpcompat.workers import child_failures
directory = os.path.join(tempfile.gettempdir(), "mpcompat-%d" % os.getuid())
print("exists after import:", os.path.exists(directory))
old = os.path.join(directory, "1.json")
if sys.argv[1] == "prune":
    os.mkdir(directory, 0o700)
    with open(old, "w") as fh:
        fh.write("{}")
    os.utime(old, (time.time() - 2 * 86400,) * 2)
elif sys.argv[1] == "open":
    os.mkdir(directory, 0o777)
    os.chmod(directory, 0o777)
elif sys.argv[1] == "link":
    os.mkdir(directory + ".real", 0o700)
    os.symlink(directory + ".real", directory)
p = multiprocessing.get_context("fork").Process(target=h.fail_and_record, args=("x",))
p.start(); p.join()
print("files:", sorted(n for n in os.listdir(directory) if not n.startswith(".")))
print("taken:", child_failures.take(p.pid) is not None)
print("real:", sorted(os.listdir(directory + ".real")) if sys.argv[1] == "link" else None)
"""


@pytest.mark.parametrize("case", ["prune", "open", "link"])
def test_directory_is_private_and_pruned(tmp_path, case):
    env = child_env(TMPDIR=str(tmp_path))
    result = run_python(OWN_DIR, case, env=env, timeout=60)
    out = result.stdout
    assert "exists after import: False" in out, result.stderr  # nothing at import
    if case == "prune":
        files = out.split("files: ")[1].splitlines()[0]
        assert "'1.json'" not in files and files.count(".json") == 1  # the old one is gone
        assert "taken: True" in out
    else:  # open to others, or a link: never written to
        assert "files: []" in out and "taken: False" in out, out + result.stderr
        if case == "link":
            assert "real: []" in out


def test_import_costs_nothing():
    code = ("import sys, mpcompat; before = set(sys.modules); import mpcompat.workers.child_failures; "
            "print(sorted(set(sys.modules) - before))")
    result = subprocess.run([sys.executable, "-c", code], env=child_env(MPCOMPAT_DISABLE="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=60)
    assert result.stdout.strip() == "['mpcompat.workers', 'mpcompat.workers.child_failures']", \
        result.stderr
