"""The note on a DataLoader dataset (or what a Pool's workers read) whose copies fill the
workers' memory, and what a DataLoader worker's OOM death names: loaded only when
:mod:`mpcompat.workers.dataset_memory` sees the rule hold, or a DataLoader worker it measured
dies of SIGKILL (patches.md, "torch.dataloader_workers: dataset memory").

- What was measured: each worker's private memory (fork), or the pickled copies (spawn).
- The projection: workers x ranks on this machine x size, against the memory limit.
- The attribute to blame: the largest container of Python objects reachable from the dataset
  (a Pool's: from the main module's globals), found by a walk bounded in objects and time
  (:func:`largest_container`), in this process, which holds the same objects.
- The fix: ``mpcompat.shared_list(...)`` / ``mpcompat.shared_dict(...)``.
"""
import itertools
import sys
import time

from mpcompat.child_failures.exits import size

_CONTAINERS = (list, tuple, dict, set, frozenset)
_VISITS = 200000       # objects the walk looks at, at most
_SECONDS = 1.0         # and seconds it takes, at most
_SAMPLE = 200          # items of a container measured, its size extrapolated from them
_ITEM_VISITS = 2000    # objects measured per sampled item, at most
_DEPTH = 4             # attributes followed from the dataset, at most
_MIN_ITEMS = 100        # a container blamed holds at least this many items
_PLURALS = ("dict", "list", "tuple", "set", "frozenset", "int", "float")
# What the workers read, by the kind of their owner.
_READ = {"DataLoader": "the dataset", "Pool": "the main process's objects"}


def say(sampler, why, memory):
    """Say the note once per process tree: ``why`` is "growth" (fork workers' private memory
    grows) or "copies" (the spawn copies weigh on the limit); ``memory``: the sampler's module,
    :mod:`mpcompat.workers.dataset_memory`, which calls this."""
    from mpcompat.errors import warn
    found = blame(sampler)
    lines = _growth_lines(sampler, memory) if why == "growth" else _copies_lines(sampler)
    if found:
        lines.append("The largest container of Python objects in %s: %s." % (
            "the dataset" if sampler.kind == "DataLoader" else "the main module's globals",
            sampler.blamed[0]))
    lines += _projection_lines(sampler, found, memory) + [sampler.blamed[1]]
    warn("\n".join(lines), key="dataset-memory", at=_loop_line())


def blame(sampler):
    """:func:`largest_container` of what ``sampler``'s workers read (its DataLoader's dataset,
    its Pool's main module), or None; sets ``sampler.blamed`` (what to name, the fix line)."""
    found = None
    if sampler.kind == "DataLoader":
        dataset = getattr(sampler.owner(), "_dataset", None)
        found = largest_container(dataset) if dataset is not None else None
    elif sys.modules.get("__main__") is not None:
        found = largest_container(sys.modules["__main__"], "")
    sampler.blamed = (_describe(found) if found else _READ[sampler.kind],
                      _fix_line(found, sampler.kind))
    return found


def _loop_line():
    """(file, line) of the user's frame that iterates the DataLoader or calls the Pool (not
    torch's, multiprocessing's or ours)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if not name.startswith(("mpcompat.", "torch.", "multiprocessing.")):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def _growth_lines(sampler, memory):
    workers = [(pid, memory.readings.get(pid)) for pid in sampler.pids]
    workers = [(pid, w) for pid, w in workers if w is not None and w.sampler is sampler]
    total = sum(w.last - w.first for _, w in workers)
    seconds = max(w.at - w.since for _, w in workers)
    each = "; ".join("pid %d: %s" % (pid, size(w.last)) for pid, w in workers)
    read = _READ[sampler.kind]
    return [
        "the private memory of this %s's %d worker processes grows as they read %s: it grew to "
        "%s in all in the %.0f s since they were forked, and still grows (Private_Dirty, "
        "/proc/PID/smaps_rollup; %s)." % (sampler.kind, len(workers), read, size(total),
                                          seconds, each),
        "Cause: reading a Python object changes its reference count, so the kernel copies "
        "each page a worker reads from %s into that worker (copy-on-write after fork): every "
        "worker ends up with its own copy of what it read." % read.replace(
            "the dataset", "the main process's dataset")]


def _copies_lines(sampler):
    sent = sampler.sent
    return [
        "every one of this %s's %d worker processes (spawn/forkserver) got its own copy of %s, "
        "pickled in its Process object: %s each, %s in all." % (
            sampler.kind, len(sent), "the dataset" if sampler.kind == "DataLoader" else
            "the Pool's initializer and initargs", size(max(sent)), size(sum(sent)))]


def _projection_lines(sampler, found, memory):
    ranks = memory.ranks()
    count = len(sampler.pids)
    if sampler.fork:
        per = max([w.last for w in map(memory.readings.get, sampler.pids)
                   if w is not None] + [found[2] if found else 0])
        what = ("the dataset's size" if sampler.kind == "DataLoader" else "the container's "
                "size") if found and found[2] >= per else "its private memory now"
    else:
        per, what = max(sampler.sent), "the pickled copy"
    total = per * count * ranks
    limit = memory.memory_limit()
    share = " = %.0f%% of %s, %s" % (100.0 * total / limit[0], limit[1], size(limit[0])) \
        if limit else ""
    return ["Projected: %d workers x %d rank(s) on this machine (%s) x %s (%s) = %s%s." % (
        count, ranks, "LOCAL_WORLD_SIZE/WORLD_SIZE" if ranks > 1 else "no LOCAL_WORLD_SIZE or "
        "WORLD_SIZE set", size(per), what, size(total), share)]


def _fix_line(found, kind):
    if not found:
        return sys.modules["mpcompat.workers.dataset_memory"].FIX
    path, container = found[0], found[3]
    helper = "shared_dict" if isinstance(container, dict) else "shared_list"
    return "Fix: %s = mpcompat.%s(%s), before the %s starts its workers (they then read one " \
        "copy in shared memory)." % (path, helper, path, kind)


def _describe(found):
    path, text, nbytes, _ = found
    return "%s: %s, about %s" % (path, text, size(nbytes))


# --- the walk -------------------------------------------------------------------------------------

def largest_container(dataset, name="dataset", visits=_VISITS, seconds=_SECONDS):
    """``(path, description, bytes, container)`` of the largest list, tuple, dict or set of
    Python objects (at least ``_MIN_ITEMS`` items) reachable from ``dataset`` (named ``name``)
    through attributes, dict values and sequence items, e.g. ``("dataset.data_infos", "list of
    28,130 dicts", 1.9e9, [...])``, or None. A module is walked from its globals (``name`` "":
    paths start with their names). Bounded: ``visits`` objects, ``seconds``; a container's size
    is extrapolated from ``_SAMPLE`` of its items."""
    budget = [visits, time.monotonic() + seconds]
    best, seen, todo = None, set(), [(name, dataset, 0)]
    if type(dataset).__name__ == "module":
        todo = [("%s.%s" % (name, key) if name else key, value, 1)
                for key, value in vars(dataset).items() if not key.startswith("__")]
    while todo and budget[0] > 0 and time.monotonic() < budget[1]:
        path, obj, depth = todo.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        budget[0] -= 1
        if isinstance(obj, _CONTAINERS):
            if len(obj) >= _MIN_ITEMS:
                nbytes, text = _measure(obj, budget)
                if best is None or nbytes > best[2]:
                    best = (path, text, nbytes, obj)
                continue
            items = obj.items() if isinstance(obj, dict) else enumerate(obj) \
                if not isinstance(obj, (set, frozenset)) else ()
            children = [("%s[%r]" % (path, key), value) for key, value in list(items)[:64]]
        else:
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict) or isinstance(obj, type) or \
                    type(obj).__name__ in ("module", "function", "method"):
                continue
            children = [("%s.%s" % (path, key), value) for key, value in attrs.items()]
        if depth < _DEPTH:
            todo += [(p, value, depth + 1) for p, value in children
                     if isinstance(value, _CONTAINERS) or hasattr(value, "__dict__")]
    return best


def _measure(container, budget):
    """(estimated bytes, "list of 600,000 dicts") of ``container``: its own size plus its items'
    deep size (a dict's: its keys' and values'), extrapolated from an even sample of them,
    taken while the walk's budget lasts."""
    count = len(container)
    step = max(1, count // _SAMPLE)
    if isinstance(container, (list, tuple)):
        sample = container[::step][:_SAMPLE]
    else:
        sample = list(itertools.islice(container.items() if isinstance(container, dict)
                                       else container, 0, None, step))[:_SAMPLE]
    seen = set()  # an object the items share (a dict's keys) counts once
    deep, measured, kinds = 0, 0, {}
    for item in sample:
        if budget[0] <= 0 or time.monotonic() > budget[1]:
            break
        deep += _deep_size(item, budget, seen)
        measured += 1
        if isinstance(container, dict):
            deep -= sys.getsizeof(item)  # the (key, value) tuple made here
            item = item[1]
        kinds[type(item).__name__] = kinds.get(type(item).__name__, 0) + 1
    kind = max(kinds, key=kinds.get) if kinds else "item"
    kind += "s" if kind in _PLURALS else " objects"
    return sys.getsizeof(container) + deep * count // max(1, measured), "%s of %s %s" % (
        type(container).__name__, "{:,}".format(count), kind)


def _deep_size(obj, budget, seen):
    """The bytes of ``obj`` and the objects it holds (at most ``_ITEM_VISITS`` of them), but
    those in ``seen``."""
    total, todo, left = 0, [obj], _ITEM_VISITS
    while todo and left > 0:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        left -= 1
        total += sys.getsizeof(item, 0)
        if isinstance(item, dict):
            todo += list(item.keys()) + list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += list(item)
        elif isinstance(getattr(item, "__dict__", None), dict) and not isinstance(item, type):
            todo.append(item.__dict__)
    budget[0] -= _ITEM_VISITS - left
    return total
