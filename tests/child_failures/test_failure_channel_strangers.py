"""mpcompat.child_failures.channel against processes that are not the parent's children, and
children that send what is not a record: the channel reads only the children this process
started, never waits for a slow sender, and a bad record never costs a good one.

Each scenario runs in a fresh interpreter, bounded by a timeout; the strangers are real
processes (``os.fork`` without multiprocessing) that connect to the parent's real socket.
"""
import re

import pytest

from testenv import child_env, run_python

COMMON = """
import multiprocessing, multiprocessing.connection, os, socket, sys, time
import mpcompat
import child_failures_helpers as h
from mpcompat.child_failures import channel

ctx = multiprocessing.get_context(sys.argv[1])


def open_channel():
    '''Start and join a child: the parent's channel opens before its first child starts.'''
    first = ctx.Process(target=h.pid)
    first.start()
    first.join()
    return channel.address().split(":", 1)[1].replace("@", "\\0", 1)


def failed_child():
    '''A child that records why it failed and exits, waited for but not joined.'''
    child = ctx.Process(target=h.fail_and_record, args=("starting",))
    child.start()
    multiprocessing.connection.wait([child.sentinel], 60)
    return child


def fork_stranger(run, *args):
    '''A process multiprocessing did not start (os.fork): it runs ``run(*args)`` and exits.'''
    pid = os.fork()
    if pid == 0:
        try:
            run(*args)
        finally:
            os._exit(0)
    return pid
"""

TRICKLE = COMMON + """
import contextlib


def trickle(address, ready):
    '''Connect, then send a byte every 0.5 s for 20 s.'''
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    os.write(ready, b"x")
    for _ in range(40):
        sock.send(b"{")
        time.sleep(0.5)


@contextlib.contextmanager
def tricklers(address):
    '''Three strangers connect to the channel and trickle into it while this runs.'''
    ready_r, ready_w = os.pipe()
    pids = [fork_stranger(trickle, address, ready_w) for _ in range(3)]
    for _ in pids:
        os.read(ready_r, 1)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def take_real_record():
    child = failed_child()
    with tricklers(address):
        began = time.monotonic()
        record = channel.take(child.pid)
    return "TAKE %.3f %s" % (time.monotonic() - began, record and record.error)


def worker_lost():
    # fork: a spawn or forkserver worker of a -c program does not import mpcompat
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pool.apply(os.getpid)
        with tricklers(address):
            began = time.monotonic()
            try:
                pool.apply(os._exit, (3,))
            except Exception as exc:
                return "POOL %.3f %s" % (time.monotonic() - began, type(exc).__name__)


address = open_channel()
print(take_real_record(), flush=True)
print(worker_lost(), flush=True)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_strangers_that_trickle_bytes_delay_no_record_and_no_worker_lost_error(method):
    result = run_python(TRICKLE, method, env=child_env(), timeout=120)
    took = re.search(r"^TAKE ([\d.]+) ValueError: the data is gone$", result.stdout, re.M)
    lost = re.search(r"^POOL ([\d.]+) WorkerLostError$", result.stdout, re.M)
    assert took and lost, result.stdout + result.stderr
    assert float(took.group(1)) < 0.5, result.stdout  # 20 s before: a stranger read to its end
    assert float(lost.group(1)) < 2, result.stdout


STRANGERS = COMMON + """
def forge(pid=None, uid=None):
    '''Record as a failing child does, naming this process's pid or ``pid``, as this user or
    as ``uid``.'''
    if uid is not None:
        os.setuid(uid)
    if pid is not None:
        os.getpid = lambda: pid
    try:
        raise ValueError("forged")
    except ValueError as exc:
        channel.record(exc)


def grandchild(top):
    channel.listen()  # this process's own channel ...
    channel._channel.address = top  # ... but its fork child inherits the top one's
    p = multiprocessing.get_context("fork").Process(target=h.fail_and_record, args=("x",))
    p.start()
    p.join()


open_channel()
real = failed_child()
strangers = [fork_stranger(forge), fork_stranger(forge, real.pid),
             fork_stranger(forge, real.pid, 65534)]
for pid in strangers:
    os.waitpid(pid, 0)
print("REAL", channel.take(real.pid).error, flush=True)
print("STRANGER", channel.take(strangers[0]), flush=True)
middle = multiprocessing.get_context("fork").Process(target=grandchild,
                                                    args=(channel.address(),))
middle.start()
middle.join()
channel._read()
print("KEPT", len(channel._channel.records), middle.exitcode, flush=True)
"""


def test_records_of_processes_this_one_did_not_start_are_ignored():
    """Strangers record after the real child: one under its own pid (kept before: the parent
    trusted the pid the sender named as its parent), two naming the real child's pid, one of
    them as another user; then a grandchild sends to the top channel."""
    result = run_python(STRANGERS, "fork", env=child_env(), timeout=60)
    assert "REAL ValueError: the data is gone" in result.stdout, result.stdout + result.stderr
    assert "STRANGER None" in result.stdout, result.stdout + result.stderr
    assert "KEPT 0 0" in result.stdout, result.stdout + result.stderr


DEEP = COMMON + """
open_channel()
address = channel.address()
# All start first, then send in turn: no start reads the channel between them.
bad_go, real_go = ctx.Event(), ctx.Event()
sent = [b"[" * 100000 + b"]" * 100000, b"garbage", b"7\\0abc"]
bad = [ctx.Process(target=h.when_set, args=(bad_go, h.send_raw, address, data)) for data in sent]
real = ctx.Process(target=h.when_set, args=(real_go, h.fail_and_record, "starting"))
for child in bad + [real]:
    child.start()
bad_go.set()
multiprocessing.connection.wait([child.sentinel for child in bad], 60)
real_go.set()
multiprocessing.connection.wait([real.sentinel], 60)
record = channel.take(real.pid)  # one read: the bad records come first
print("REAL", record and record.error, flush=True)
print("BAD", [channel.take(child.pid) for child in bad], flush=True)
"""


def test_a_deeply_nested_or_broken_record_costs_nothing_and_drops_no_good_one():
    result = run_python(DEEP, "fork", env=child_env(), timeout=60)
    assert "REAL ValueError: the data is gone" in result.stdout, result.stdout + result.stderr
    assert "BAD [None, None, None]" in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr


RACE = COMMON + """
import threading


class ReadWhileStarting(multiprocessing.context.ForkProcess):
    '''Its start returns only once the child has recorded, ended, and another thread has read
    the channel (the window a busy interpreter can open between a child's start and the
    return of Process.start).'''

    @staticmethod
    def _Popen(process_obj):
        popen = multiprocessing.context.ForkProcess._Popen(process_obj)
        multiprocessing.connection.wait([popen.sentinel], 60)
        reader = threading.Thread(target=channel.take, args=(0,))
        reader.start()
        reader.join()
        return popen


open_channel()
child = ReadWhileStarting(target=h.fail_and_record, args=("starting",))
child.start()
record = channel.take(child.pid)
print("RECORD", record and record.error, flush=True)
child.join()
"""


def test_a_record_sent_before_its_start_returns_is_kept():
    result = run_python(RACE, "fork", env=child_env(), timeout=60)
    assert "RECORD ValueError: the data is gone" in result.stdout, result.stdout + result.stderr


QUIET = COMMON + """
open_channel()
child = failed_child()
print("LOADED", "mpcompat.child_failures.exits" in sys.modules, flush=True)
from mpcompat.child_failures import exits  # what a Pool or an executor loads as it is made
before = set(sys.modules)
channel.listen()
note = channel.note_for([child.pid], "Pool worker process")
channel.discard([child.pid])
channel.take(child.pid)
print("NOTE", note is not None, flush=True)
print("IMPORTED", sorted(set(sys.modules) - before), flush=True)
"""


def test_the_parent_side_imports_nothing_and_nothing_at_start_up():
    """Pool and executor helper threads read the channel: a first import there can freeze a
    fork child made meanwhile (it inherits the held import lock). What says a record
    (``exits``) is not loaded by starts that all went well: a Pool or an executor loads it as it
    is made, anyone else as a child fails."""
    result = run_python(QUIET, "fork", env=child_env(), timeout=60)
    assert "LOADED False" in result.stdout, result.stdout + result.stderr
    assert "NOTE True" in result.stdout, result.stdout + result.stderr
    assert "IMPORTED []" in result.stdout, result.stdout + result.stderr
    code = "import sys, mpcompat; print(sorted(m for m in sys.modules if 'workers' in m))"
    assert run_python(code, env=child_env()).stdout.strip() == "[]"
