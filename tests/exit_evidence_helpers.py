"""Functions for the tests of ``tests/exit_evidence`` (how a dead worker's end is measured): the
tasks that kill their worker (importable by name in spawn and forkserver children), and the test
side's memory cgroup with a limit, made and removed by the test.

Keep this module importable without pytest, torch or mpcompat: children import it.
"""
import os
import signal
import sys
import time

LIMIT = 200 << 20  # the child cgroup's memory limit


# --- run in the workers ------------------------------------------------------------------------

def join_cgroup(procs):
    """Move this process into the cgroup whose ``cgroup.procs`` file is ``procs``."""
    with open(procs, "w") as fh:
        fh.write(str(os.getpid()))


def exhaust_memory(procs=None):
    """A task that moves its worker into the cgroup of ``procs`` (if given), then allocates
    (and touches) 10 MB at a time until the kernel's OOM killer kills it."""
    if procs:
        join_cgroup(procs)
    hoard = []
    while True:
        hoard.append(bytearray(10 << 20))


def kill_myself(_=None):
    """A task that SIGKILLs its own worker."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)


class Fatal(BaseException):
    """Not an Exception: a Pool worker does not catch it, and it ends the worker (exit code 1)."""


def end_worker(how):
    """A task that ends its worker: "raise" (an uncaught Fatal: exit code 1), "exit3"
    (os._exit(3)), "exit255" (os._exit(255)), "sys.exit7" (sys.exit(7))."""
    if how == "raise":
        raise Fatal("the task gave up")
    if how == "sys.exit7":
        sys.exit(7)
    os._exit(int(how[len("exit"):]))


# --- the test side -----------------------------------------------------------------------------

def kernel_log_readable():
    """Whether this process can read the kernel log (/dev/kmsg)."""
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


def _mounts():
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            yield fields[3], fields[4], tail[0], tail[2].split(",")


def _own_cgroups():
    paths = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if not controllers:
                paths[2] = path
            elif "memory" in controllers.split(","):
                paths[1] = path
    return paths


def make_cgroup(name, limit=LIMIT):
    """Make a memory cgroup ``name`` with a memory limit of ``limit`` bytes (v1: under this
    process's memory cgroup; v2: under the root of the unified hierarchy, where the memory
    controller is enabled for its children). Returns its directory, or None where no memory
    cgroup can be made here (no cgroup file system, not root)."""
    paths = _own_cgroups()
    for root, point, fstype, options in _mounts():
        if fstype == "cgroup" and "memory" in options and 1 in paths and root == "/":
            directory, limit_file = point + paths[1].rstrip("/") + "/" + name, \
                "memory.limit_in_bytes"
        elif fstype == "cgroup2" and 2 in paths and root == "/":
            try:
                with open(os.path.join(point, "cgroup.subtree_control")) as fh:
                    if "memory" not in fh.read().split():
                        continue
            except OSError:
                continue
            directory, limit_file = os.path.join(point, name), "memory.max"
        else:
            continue
        try:
            os.mkdir(directory)
            with open(os.path.join(directory, limit_file), "w") as fh:
                fh.write(str(limit))
            return directory
        except OSError:
            remove_cgroup(directory)
    return None


def remove_cgroup(directory):
    """Remove the cgroup ``directory`` (its processes must have ended: waits a little)."""
    deadline = time.time() + 10
    while os.path.isdir(directory):
        try:
            os.rmdir(directory)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


# --- torch: a dataset and a torch.multiprocessing.spawn target (run in the workers) -------------

class EndsAtItem1(object):
    """A map-style dataset of 4 items whose item 1 ends its DataLoader worker as ``how`` says:
    "oom" (moves into the cgroup of ``procs`` and allocates until killed) or "kill"
    (SIGKILLs itself)."""

    def __init__(self, how, procs=None):
        self.how, self.procs = how, procs

    def __len__(self):
        return 4

    def __getitem__(self, index):
        if index == 1:
            exhaust_memory(self.procs) if self.how == "oom" else kill_myself()
        return index


def spawned(index, how, procs=None):
    """A torch.multiprocessing.spawn target that ends as ``how`` says: "oom", "kill" or
    "sys.exit7"."""
    if how == "oom":
        exhaust_memory(procs)
    elif how == "kill":
        kill_myself()
    else:
        end_worker(how)
