"""Tasks for tests/crash_stacks and tests/shared_memory that crash their worker in native code,
importable by name in spawn and forkserver children, and the scenarios' report of a crash.

Keep this module importable without pytest or torch: children import it.
"""
import ctypes
import os
import traceback


def segfault(pid_file):
    """Write this process's pid to ``pid_file``, then read address 0 (SIGSEGV)."""
    write_pid(pid_file)
    ctypes.string_at(0)  # CRASH LINE


class Segfaulting(object):
    """A map-style dataset (for a DataLoader) whose every item is :func:`segfault`."""

    def __init__(self, pid_file):
        self.pid_file = pid_file

    def __len__(self):
        return 4

    def __getitem__(self, index):
        segfault(self.pid_file)


def write_pid(pid_file):
    """Write this process's pid to ``pid_file``, whole, for the process reading it."""
    with open(pid_file + ".new", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pid_file + ".new", pid_file)


def crash_line():
    """(path, line) of the line of :func:`segfault` that crashes."""
    with open(__file__) as fh:
        number = next(i for i, text in enumerate(fh, 1) if text.rstrip().endswith("# CRASH LINE"))
    return os.path.abspath(__file__), number


def crash_report(exc, pid_file):
    """What a scenario reports of a worker crash it caught as ``exc``: the error as the user
    reads it, then what ``exits.crash_lines`` still holds for that worker (nothing once
    the error's own report has read it), and the parent's crash files left."""
    with open(pid_file) as fh:
        pid = int(fh.read())
    try:
        from mpcompat.child_failures import channel, exits
        lines, left = exits.crash_lines(pid), channel.files_left()
    except ImportError:  # mpcompat before crash stacks
        lines, left = [], []
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"error": text, "lines": lines, "pid": pid, "left": left}


class EightMiB(object):
    """A map-style dataset (for a DataLoader) whose items are 8 MiB tensors (float32)."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        import torch  # in a DataLoader worker: torch is loaded already
        return torch.zeros(2 * 1024 * 1024)


class EightMiBOnAFullShm(EightMiB):
    """EightMiB whose worker fills /dev/shm first: the batch's segment finds no room at all (torch
    before 2.10: "unable to write to file </torch_...>", as when another worker's segment filled
    it; 2.10+: "unable to allocate shared memory")."""

    def __getitem__(self, index):
        import os
        try:
            # "ab": a worker's next item must not free what its first filled ("wb" truncates,
            # and the other worker's segment could then find room, and die of SIGBUS).
            with open("/dev/shm/filled-by-%d" % os.getpid(), "ab") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            pass
        return EightMiB.__getitem__(self, index)
