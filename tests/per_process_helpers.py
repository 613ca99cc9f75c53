"""Factories, datasets and scenario steps for tests/per_process/: importable by child processes.

Nothing here imports torch, lmdb or h5py at module level (the torch-free tests import this
module on Python 3.8 and 3.13 too).
"""
import collections
import json
import os
import time

import mpcompat


def log_event(log, event, name):
    """Append ``event name pid`` to the file ``log`` (one line; several processes may write)."""
    if log:
        try:
            with open(log, "a") as f:
                f.write("%s %s %d\n" % (event, name, os.getpid()))
        except NameError:  # a __del__ at interpreter shutdown: builtins are gone
            pass


def read_log(log):
    """The lines of ``log`` as ``(event, name, pid)`` tuples (empty if it does not exist)."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [(e, n, int(p)) for e, n, p in (line.split() for line in f if line.strip())]


class Resource(object):
    """A handle-like object: state of its own, close(), with, iteration, len, calls."""

    made = collections.Counter()  # name -> how many Resources this process made

    def __init__(self, name, log=None, delay=0.0):
        if delay:
            time.sleep(delay)
        self.name = name
        self.log = log
        self.pid = os.getpid()
        self.secret = os.urandom(16).hex()  # state that must never reach a pickle
        self.items = [1, 2, 3]
        self.closed = False
        Resource.made[name] += 1
        log_event(log, "open", name)

    def close(self):
        """Mark it closed and log it."""
        self.closed = True
        log_event(self.log, "close", self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def __contains__(self, value):
        return value in self.items

    def __call__(self, value):
        return (self.name, value)

    def __str__(self):
        return "Resource(%s)" % self.name

    def __del__(self):
        log_event(getattr(self, "log", None), "del", getattr(self, "name", "?"))


def made_named(name):
    """How many Resources named ``name`` this process made."""
    return Resource.made[name]


class Ticker(object):
    """An iterator: next() counts up from 0."""

    def __init__(self):
        self.n = -1

    def __iter__(self):
        return self

    def __next__(self):
        self.n += 1
        return self.n


class Liar(object):
    """A class that, like lmdb's Environment, says it lives in builtins: pickle cannot find it
    by reference, per_process finds it in this module."""

    def __init__(self, value):
        self.value = value


Liar.__module__ = "builtins"


def failing_factory():
    """A factory that raises AttributeError."""
    raise AttributeError("no such thing")


def recursive_factory(holder):
    """A factory that uses the per-process object it is creating (``holder[0]``)."""
    return holder[0].name


def log_inherited(obj):
    """An on_fork callable: log which inherited object it got."""
    log_event(obj.log, "inherited", obj.name)


def fork_child_uses(proxy, log, extra=None):
    """Fork child step: log what it saw, then use ``proxy`` (a per_process(Resource, ...))."""
    log_event(log, "before-created=%s" % mpcompat.per_process.created(proxy), "child")
    log_event(log, "repr-inherited=%s" % ("inherited from process" in repr(proxy)), "child")
    log_event(log, "use-%s" % proxy.name, "child")
    log_event(log, "after-created=%s" % mpcompat.per_process.created(proxy), "child")
    log_event(log, "child-object-pid=%d" % proxy.pid, "child")
    if extra == "close":
        mpcompat.per_process.close(proxy)


def fork_child_drops(holder, log):
    """Fork child step: drop the only reference to an unused per-process object, collect."""
    import gc
    holder.clear()
    gc.collect()
    log_event(log, "dropped", "child")


def append_text(proxy, text):
    """Child step: write ``text`` through a per_process(open, path, "a") and close it."""
    proxy.write(text)
    mpcompat.per_process.close(proxy)


def spawn_child_reports(proxy, liar, out):
    """Spawn child step: report on a received per-process object, as JSON in ``out``."""
    import sys
    report = {
        "pid": os.getpid(),
        "created_before": mpcompat.per_process.created(proxy),
        "repr": repr(proxy),
        "name": proxy.name,
        "object_pid": proxy.pid,
        "created_after": mpcompat.per_process.created(proxy),
        "liar": liar.value,
        "module_imported": "mpcompat.pickling.per_process" in sys.modules,
    }
    fresh = mpcompat.per_process(Resource, "made-in-child")  # the name may be the module now
    report["fresh_name"] = fresh.name
    with open(out, "w") as f:
        json.dump(report, f)


# -- real handles, for tests/per_process/test_per_process_handles.py (.venv: torch, lmdb, h5py)

def make_lmdb(path, n, lock=True):
    """Create an lmdb environment at ``path``: keys b"0".., values b"lmdbvalue0".."""
    import lmdb
    env = lmdb.open(path, map_size=1 << 24, lock=lock)
    with env.begin(write=True) as txn:
        for i in range(n):
            txn.put(str(i).encode(), ("lmdbvalue%d" % i).encode())
    env.close()


def make_h5(path, n):
    """Create an HDF5 file at ``path`` with a dataset "x" = 10 * arange(n)."""
    import h5py
    import numpy
    with h5py.File(path, "w") as f:
        f["x"] = numpy.arange(n) * 10


def make_blob(path, n):
    """Create a file of ``n`` 8-byte records b"rec00000".."""
    with open(path, "wb") as f:
        for i in range(n):
            f.write(b"rec%05d" % i)


class HandlesDataset(object):
    """A map-style dataset keeping three per-process handles, as real datasets do."""

    def __init__(self, lmdb_path, h5_path, blob_path, n, lmdb_kwargs=None, on_fork=None):
        import h5py
        import lmdb
        kwargs = dict(readonly=True, lock=False) if lmdb_kwargs is None else lmdb_kwargs
        per_process = mpcompat.per_process
        self.n = n
        self.env = per_process(lmdb.open, lmdb_path, on_fork=on_fork, **kwargs)
        self.h5 = per_process(h5py.File, h5_path, "r")
        self.blob = per_process(open, blob_path, "rb")

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.env.begin() as txn:
            value = txn.get(str(i).encode()).decode()
        self.blob.seek(8 * i)
        return {
            "pid": os.getpid(),
            "lmdb": value,
            "h5": int(self.h5["x"][i]),
            "blob": self.blob.read(8).decode(),
            "blob_fd": self.blob.fileno(),
            "h5_id": int(self.h5.id.id),
            "created": [mpcompat.per_process.created(h) for h in (self.env, self.h5, self.blob)],
        }


def collate_items(batch):
    """DataLoader collate_fn: keep the dicts as they are."""
    return batch
