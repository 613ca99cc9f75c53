"""Functions for tests/shared_containers, importable by pool workers and DataLoader workers
(standard library only: a map-style dataset needs no torch class)."""
import os
import pickle


def memory(pid="self"):
    """``(Private_Dirty, Pss)`` of process ``pid`` in bytes, from ``/proc/PID/smaps_rollup``."""
    found = {}
    with open("/proc/%s/smaps_rollup" % pid) as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Private_Dirty", "Pss"):
                found[name] = int(rest.split()[0]) * 1024
    return found["Private_Dirty"], found["Pss"]


def records(n):
    """``n`` small dicts, as a dataset's infos."""
    return [{"id": i, "token": "%032x" % i, "size": (i % 7) * 0.5, "tags": ["a", "b"]}
            for i in range(n)]


def summary(container):
    """What a child sees of a shared container: its type, backend, length, a few reads."""
    if hasattr(container, "keys"):
        keys = list(container)
        return (type(container).__name__, container.backend, len(container),
                [container[k] for k in keys[:2]], dict(container.items()))
    return (type(container).__name__, container.backend, len(container), container[0],
            container[-1], container[1:3], list(container))


def private_growth(payload, passes=2, first=()):
    """Unpickle ``payload`` here (a plain list, or a shared container by handle), read every
    item ``passes`` times; return ``(bytes the private memory grew by, items read)``. The
    modules in ``first`` are imported before the first reading."""
    for name in first:
        __import__(name)
    before = memory()[0]
    loaded = pickle.loads(payload)
    count = 0
    for _ in range(passes):
        for item in loaded:
            count += item["id"] >= 0
    return memory()[0] - before, count


class Chunks(object):
    """A map-style dataset over ``infos`` in chunks of ``chunk`` items: item ``k`` reads
    chunk ``k`` and returns ``(pid, ids read, Private_Dirty, Pss)``."""

    def __init__(self, infos, chunk):
        self.infos, self.chunk = infos, chunk

    def __len__(self):
        return -(-len(self.infos) // self.chunk)

    def __getitem__(self, k):
        stop = min(len(self.infos), (k + 1) * self.chunk)
        ids = [self.infos[i]["id"] for i in range(k * self.chunk, stop)]
        return (os.getpid(), ids) + memory()


def keep(batch):
    """A ``collate_fn`` that keeps the samples as they are."""
    return batch
