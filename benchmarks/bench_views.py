"""Pickling records that hold dict views: mpcompat's reducers against the manual fix
(the same records holding ``list(keys)``), cloudpickle and dill.

100,000 records, each a small dict holding a ``dict_keys`` view of its own 10-key dict (as
a dataset's per-sample infos keep ``class_names = class_range.keys()``: the same ten name
strings in every record). Each variant is timed with protocol 5, interleaved with the others
over several rounds (dill, which is slow, in fewer of them); best and median per variant,
ratios side by side. Target: mpcompat faster than cloudpickle on the same payload. The ratio to
the manual fix is reported: mpcompat's reducers are pure Python, one call and one arguments
tuple per view, and that tuple is the cost (converting the views by hand at dump time costs
about the same, as the table shows).
"""
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from _common import Table, interleaved, median, verdict  # noqa: E402

N_RECORDS = 100000
N_KEYS = 10
PROTOCOL = 5
OURS = "pickle + mpcompat (views)"
MANUAL = "pickle, manual fix (lists)"
CONVERT = "manual fix, converting at dump time"
CLOUDPICKLE = "cloudpickle (views)"
DILL = "dill (views)"


def make_records(n=N_RECORDS, as_list=False, own_names=False):
    """``n`` records ``{"id", "token", "class_names"}``; class_names is a dict_keys view of
    the record's own 10-key dict ``{class name: range}`` (or ``list(keys)`` with ``as_list``).
    The name strings are shared by all records, or with ``own_names`` made for each one."""
    shared = ["class_%d" % k for k in range(N_KEYS)]
    ranges = [30, 40, 50]
    records = []
    for i in range(n):
        names = ["".join(["class_", str(k)]) for k in range(N_KEYS)] if own_names else shared
        class_range = {name: ranges[(i + k) % 3] for k, name in enumerate(names)}
        keys = class_range.keys()
        records.append({"id": i, "token": "%032x" % i,
                        "class_names": list(keys) if as_list else keys})
    return records


def converted(records):
    """What a user's manual fix does at dump time: replace each view by a list."""
    return [dict(r, class_names=list(r["class_names"])) for r in records]


def check_round_trip(views, lists):
    """The view records load back as views with the keys of the list records."""
    loaded = pickle.loads(pickle.dumps(views, PROTOCOL))
    assert type(loaded[7]["class_names"]) is type({}.keys())
    assert [list(r["class_names"]) for r in loaded] == [r["class_names"] for r in lists]


def run(quick=False):
    import mpcompat

    if not mpcompat.is_active():
        mpcompat.activate()
    return [shared_names_table(5 if quick else 15)]


def shared_names_table(rounds):
    import cloudpickle
    import dill

    views = make_records()
    lists = make_records(as_list=True)
    check_round_trip(views, lists)
    variants = {
        OURS: lambda: pickle.dumps(views, PROTOCOL),
        MANUAL: lambda: pickle.dumps(lists, PROTOCOL),
        CONVERT: lambda: pickle.dumps(converted(views), PROTOCOL),
        CLOUDPICKLE: lambda: cloudpickle.dumps(views, PROTOCOL),
        DILL: lambda: dill.dumps(views, PROTOCOL),
    }
    sizes = {name: len(func()) for name, func in variants.items()}
    times = interleaved(variants, rounds, limits={DILL: 3})
    best = {name: min(t) for name, t in times.items()}
    med = {name: median(t) for name, t in times.items()}

    table = Table("Pickling %d records holding a %d-key dict_keys over shared names "
                  "(protocol %d)" % (N_RECORDS, N_KEYS, PROTOCOL),
                  ["variant", "best", "median", "vs manual fix (best)",
                   "vs mpcompat (best)", "size", "target", "result"])
    targets = {
        CLOUDPICKLE: ("slower than mpcompat", verdict(best[CLOUDPICKLE] > best[OURS])),
    }
    for name in variants:
        table.add(name, "%.1f ms" % (best[name] * 1000), "%.1f ms" % (med[name] * 1000),
                  "%.2fx" % (best[name] / best[MANUAL]), "%.2fx" % (best[name] / best[OURS]),
                  "%.2f MB" % (sizes[name] / 1e6), *targets.get(name, ("(reported)", "")))
    table.notes += [
        "%d interleaved rounds (order rotated each round; dill in %d of them), gc off while "
        "timing" % (rounds, len(times[DILL])),
        "mpcompat / manual fix: %.2fx best, %.2fx median"
        % (best[OURS] / best[MANUAL], med[OURS] / med[MANUAL]),
        "'%s' builds the list records inside the timed region, as a user converting the "
        "views before pickling would" % CONVERT,
    ]
    return table


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
