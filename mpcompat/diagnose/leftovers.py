"""What an earlier run left behind: the processes that hold a TCP port or a GPU's device files.

A run that is killed leaves its children (DataLoader and Pool workers, torchrun's ranks) alive:
they keep the master port and GPU memory, and the next run fails with ``Address already in
use`` or CUDA out of memory. Read here from ``/proc`` (Linux), only when such a failure is
seen (``mpcompat.patches.torch_leftovers``):

- :func:`port_holders`: ``/proc/net/tcp`` and ``tcp6`` give the sockets bound to a local port
  (their inode and owner's uid); the ``socket:[inode]`` links in ``/proc/*/fd`` give their
  processes. A process of another user cannot be read: its socket's uid is still known.
- :func:`device_holders`: this user's orphans with a file matching a glob (``/dev/nvidia*``)
  open.
- An orphan, from evidence: the leader of its process group (the run that started it: a
  process inherits its parent's group, and a shell makes each command a group's leader) has
  exited while it lives on, whoever adopted it (pid 1, or a subreaper, whose flag cannot be
  read for another process); or it is a child of pid 1 in another's group. A process that
  leads its own group under pid 1 (a daemon, a ``setsid`` run) is not called one.
"""
import os
import re

DEVICES = "/dev/nvidia*"  # the device files a CUDA process holds open
_LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp


class Holder(object):
    """A process holding what a run needs. pid, uid; command (its command line, "" if it cannot
    be read), age (seconds since it started, or None), ppid and pgrp (None where unknown),
    orphan (why it is one, "" if it is not)."""

    __slots__ = ("pid", "uid", "command", "age", "ppid", "pgrp", "orphan")

    def __init__(self, pid, uid, command, age, ppid, pgrp, orphan):
        self.pid, self.uid, self.command, self.age = pid, uid, command, age
        self.ppid, self.pgrp, self.orphan = ppid, pgrp, orphan

    def __repr__(self):
        return "Holder(pid=%d, command=%r, orphan=%r)" % (self.pid, self.command, self.orphan)

    def describe(self):
        """One line: pid, age, the orphan evidence, command line."""
        if self.pid == os.getpid():
            return "this process (pid %d)" % self.pid
        parts = ["pid %d" % self.pid]
        if self.age is not None:
            parts.append("started %s ago" % _duration(self.age))
        if self.orphan:
            parts.append("an orphan: %s" % self.orphan)
        elif self.ppid is not None:
            parts.append("child of %s" % _parent(self.ppid))
        command = self.command or "(command line not readable)"
        return "%s: %s" % (", ".join(parts), command if len(command) <= 300 else
                           command[:297] + "...")


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _command(pid):
    """The command line of ``pid`` ("" if it cannot be read or is empty: a kernel thread)."""
    try:
        words = _read("/proc/%d/cmdline" % pid).split(b"\0")
    except OSError:
        return ""
    return " ".join(w.decode("utf-8", "replace") for w in words if w)


def _stat(pid):
    """``(state, ppid, pgrp, starttime in clock ticks)`` of ``pid``, or None."""
    try:
        text = _read("/proc/%d/stat" % pid).decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and ")"
    if len(fields) < 20:  # it exited as it was read
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _parent(pid):
    """``pid 1``, or ``pid N (its short name)``."""
    if pid == 1:
        return "pid 1"
    try:
        return "pid %d (%s)" % (pid, _read("/proc/%d/comm" % pid).decode("utf-8", "replace")
                                .strip())
    except OSError:
        return "pid %d" % pid


def _alive(pid):
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")  # a zombie has exited


def _uptime():
    return float(_read("/proc/uptime").split()[0])


def orphan_evidence(pid, ppid, pgrp):
    """Why ``pid`` (parent ``ppid``, process group ``pgrp``) is an orphan, "" if nothing says
    it is one."""
    if pgrp != pid and pgrp > 0 and not _alive(pgrp):
        return ("the run that started it (pid %d, the leader of its process group) has "
                "exited%s" % (pgrp, "" if ppid == pgrp else " and %s adopted it" % _parent(ppid)))
    if ppid == 1 and pgrp not in (pid, 1):  # in pid 1's own group: pid 1 may have started it
        return "its parent exited and pid 1 adopted it"
    return ""


def holder(pid, uptime=None):
    """The :class:`Holder` for ``pid``, or None once it is gone."""
    stat = _stat(pid)
    try:
        uid = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None
    if stat is None:
        return None
    _, ppid, pgrp, start = stat
    try:
        age = (uptime if uptime is not None else _uptime()) - start / float(
            os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        age = None
    return Holder(pid, uid, _command(pid), age, ppid, pgrp, orphan_evidence(pid, ppid, pgrp))


def _pids():
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit()]


def _fd_targets(pid):
    """What the open files of ``pid`` are (link targets); empty where they cannot be read."""
    directory = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(directory)
    except OSError:
        return ()
    found = []
    for fd in fds:
        try:
            found.append(os.readlink(os.path.join(directory, fd)))
        except OSError:
            continue  # closed meanwhile
    return found


def _sockets(port):
    """``{inode: (uid, listening)}`` of the TCP sockets bound to local ``port`` (IPv4, IPv6)."""
    found = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = _read(path).decode("ascii", "replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(fields) < 10 or int(fields[1].rpartition(":")[2], 16) != port:
                continue
            inode = int(fields[9])
            if inode:  # 0: no process owns it (TIME_WAIT)
                listening = found.get(inode, (0, False))[1] or fields[3] == _LISTEN
                found[inode] = (int(fields[7]), listening)
    return found


def port_holders(port):
    """``(holders, unread)`` for TCP ``port``: the :class:`Holder` of every process with a
    socket bound to it (listening ones first), and ``[(uid, inode)]`` for its sockets whose
    process could not be read (another user's)."""
    sockets = _sockets(port)
    if not sockets:
        return [], []
    wanted = dict(("socket:[%d]" % inode, inode) for inode in sockets)
    pids, seen = {}, set()
    for pid in _pids():
        for target in _fd_targets(pid):
            inode = wanted.get(target)
            if inode is not None:
                seen.add(inode)
                pids.setdefault(pid, sockets[inode][1])
    uptime = _uptime()
    holders = [h for h in (holder(pid, uptime) for pid in sorted(pids, key=lambda p: (
        not pids[p], p))) if h is not None]
    unread = [(uid, inode) for inode, (uid, _) in sorted(sockets.items()) if inode not in seen]
    return holders, unread


def device_holders(pattern=None, uid=None):
    """The :class:`Holder` of each orphan of user ``uid`` (default: this process's) that has a
    file matching the glob ``pattern`` (default :data:`DEVICES`) open, oldest first."""
    from fnmatch import fnmatchcase
    pattern = pattern or DEVICES
    uid = os.getuid() if uid is None else uid
    uptime, found = _uptime(), []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            if os.stat("/proc/%d" % pid).st_uid != uid:
                continue
        except OSError:
            continue
        if any(fnmatchcase(t, pattern) for t in _fd_targets(pid)):
            h = holder(pid, uptime)
            if h is not None and h.orphan:
                found.append(h)
    return sorted(found, key=lambda h: -(h.age or 0))


def _duration(seconds):
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %d s" % divmod(seconds, 60)
    if seconds < 86400:
        return "%d h %d min" % (seconds // 3600, seconds % 3600 // 60)
    return "%d d %d h" % (seconds // 86400, seconds % 86400 // 3600)


def _user(uid):
    try:
        import pwd
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (ImportError, KeyError):
        return "uid %d" % uid


# The errors: EADDRINUSE as torch 1.9 ("Address already in use") and 2.x (DistNetworkError:
# "... port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in
# use") raise it.
_IN_USE = ("address already in use", "eaddrinuse")
_PORT = re.compile(r"\bport:? (\d+)")


def _chain(exc):
    seen = []
    while exc is not None and not any(exc is s for s in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def port_in_use(exc):
    """``(True, port or None)`` if ``exc`` or an error it comes from says a port is in use
    (the port where the message names one), else ``(False, None)``."""
    for error in _chain(exc):
        text = str(error).lower()
        if any(words in text for words in _IN_USE):
            found = _PORT.search(text)
            return True, int(found.group(1)) if found else None
    return False, None


def port_note(port):
    """The note for a failure to listen on ``port`` because it is in use: who holds it."""
    holders, unread = port_holders(port)
    if not holders and not unread:
        return ("port %d was in use, and no process on this machine holds it now (read from "
                "/proc/net/tcp and tcp6): it has exited since, or it is in another network "
                "namespace (a container)" % port)
    lines = []
    orphans = [h for h in holders if h.orphan]
    if orphans:
        lines.append("port %d is held by %s left by an earlier run that has exited:" % (
            port, "a process" if len(orphans) == 1 else "%d processes" % len(orphans)))
    else:
        lines.append("port %d is held by another process:" % port)
    lines += ["  " + h.describe() for h in holders]
    lines += ["  a socket (inode %d) of user %s, in a process that this user (uid %d) cannot "
              "read" % (inode, _user(uid), os.getuid()) for uid, inode in unread]
    if orphans:
        lines.append("Stop it (kill %s), or choose another port (MASTER_PORT, "
                     "--master-port)." % " ".join(str(h.pid) for h in orphans))
    return "\n".join(lines)


def is_cuda_oom(exc):
    """Whether ``exc`` says CUDA ran out of memory ("CUDA out of memory", "CUDA error: out of
    memory")."""
    text = str(exc)
    return "CUDA out of memory" in text or "CUDA error: out of memory" in text


def device_note(pattern=None):
    """The note for CUDA out of memory as a process starts: this user's orphans holding a GPU
    (:func:`device_holders`), or None when there are none."""
    holders = device_holders(pattern)
    if not holders:
        return None
    return "\n".join(
        ["%s of this user, left by an earlier run, %s the GPU open (%s) and may hold its "
         "memory:" % ("an orphaned process" if len(holders) == 1 else
                      "%d orphaned processes" % len(holders),
                      "holds" if len(holders) == 1 else "hold", pattern or DEVICES)]
        + ["  " + h.describe() for h in holders]
        + ["Stop %s (kill %s) and run again." % ("it" if len(holders) == 1 else "them",
                                                " ".join(str(h.pid) for h in holders))])
