"""``mpcompat.diagnose.leftovers``: who holds a port or a device file, read from /proc, with
real orphans (a run killed while its worker holds a socket or a file)."""
import os
import socket
import sys

import pytest

from leftover_runs import leave
from mpcompat.diagnose import leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_device_holders_lists_this_users_orphans_only(tmp_path):
    device = tmp_path / "nvidia0"
    device.write_bytes(b"")
    pattern = str(tmp_path / "nvidia*")
    with leave("file", str(device)) as orphan, leave("file", str(device), kill_run=False) as \
            alive:
        found = leftovers.device_holders(pattern)
        assert [h.pid for h in found] == [orphan.pid]  # not the worker of a live run
        assert found[0].command == orphan.command
        assert 0 <= found[0].age < 120
        assert "the run that started it (pid %d" % orphan.run in found[0].orphan
        assert leftovers.device_holders(str(tmp_path / "nvidia1*")) == []
        assert leftovers.device_holders(pattern, uid=os.getuid() + 1) == []
        note = leftovers.device_note(pattern)
        assert note.startswith("an orphaned process of this user, left by an earlier run, "
                               "holds the GPU open (%s)" % pattern)
        assert "pid %d, started " % orphan.pid in note and orphan.command in note
        assert "kill %d" % orphan.pid in note and str(alive.pid) not in note


def test_port_note_names_the_orphan_listening(tmp_path):
    with leave("socket") as orphan, leave("socket", kill_run=False) as alive:
        holders, unread = leftovers.port_holders(orphan.port)
        assert [h.pid for h in holders] == [orphan.pid] and unread == []
        note = leftovers.port_note(orphan.port)
        first, line = note.splitlines()[:2]
        assert first == ("port %d is held by a process left by an earlier run that has "
                         "exited:" % orphan.port)
        assert line.startswith("  pid %d, started " % orphan.pid)
        assert "an orphan: the run that started it (pid %d, the leader of its process group)"\
            " has exited" % orphan.run in line and line.endswith(orphan.command)
        other = leftovers.port_note(alive.port)
        assert other.splitlines()[0] == "port %d is held by another process:" % alive.port
        assert "pid %d, started " % alive.pid in other and "orphan" not in other
        assert "child of pid %d" % alive.run in other


def test_port_note_for_this_process_and_a_free_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert "  this process (pid %d)" % os.getpid() in leftovers.port_note(port)
    assert "no process on this machine holds it now" in leftovers.port_note(port)


def test_port_in_use_reads_torch_messages():
    torch2 = RuntimeError("The server socket has failed to listen on any local network address."
                          " port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
                          "address already in use")
    assert leftovers.port_in_use(torch2) == (True, 29500)
    assert leftovers.port_in_use(RuntimeError("Address already in use")) == (True, None)
    try:
        try:
            raise RuntimeError("Address already in use")
        except RuntimeError as exc:
            raise ValueError("rendezvous failed") from exc
    except ValueError as outer:
        assert leftovers.port_in_use(outer) == (True, None)
    assert leftovers.port_in_use(RuntimeError("Connection refused")) == (False, None)


def test_an_orphan_adopted_by_a_subreaper_is_one():
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    assert prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: orphans below come to us
    adopted = []
    try:
        with leave("socket") as orphan:
            adopted.append(orphan.pid)
            found, = leftovers.port_holders(orphan.port)[0]
            assert found.ppid == os.getpid()
            assert found.orphan == ("the run that started it (pid %d, the leader of its process "
                                    "group) has exited and pid %d (%s) adopted it" % (
                                        orphan.run, os.getpid(), _comm(os.getpid())))
    finally:
        prctl(36, 0, 0, 0, 0)
        for pid in adopted:  # killed by leave(), and ours to reap
            os.waitpid(pid, 0)


def test_an_orphan_whose_group_lives_on_is_one():
    with leave("socket", session=False) as orphan:  # the run was not its group's leader
        found, = leftovers.port_holders(orphan.port)[0]
        assert found.pgrp == os.getpgrp()
        if os.path.exists("/proc/%d" % found.pgrp):
            # Under a subreaper (this test's ancestor) nothing says its parent exited.
            assert found.orphan == ("its parent exited and pid 1 adopted it" if found.ppid == 1
                                    else "")
        else:  # this test's own group lost its leader (a CI shell that went on in background)
            assert found.orphan.startswith("the run that started it (pid %d, the leader of its "
                                           "process group) has exited" % found.pgrp)


def _comm(pid):
    with open("/proc/%d/comm" % pid) as f:
        return f.read().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="reads as another user: needs root")
def test_a_holder_of_another_user_is_named_by_its_socket():
    with leave("socket") as orphan:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the reader, as nobody: root's processes cannot be read
            try:
                os.setuid(65534)
                os.write(write, leftovers.port_note(orphan.port).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            note = pipe.read()
        os.waitpid(pid, 0)
    lines = note.splitlines()
    assert lines[0] == "port %d is held by another process:" % orphan.port, note
    assert lines[1].startswith("  a socket (inode ") and lines[1].endswith(
        ") of user root (uid 0), in a process that this user (uid 65534) cannot read"), note
