"""A spawn ``multiprocessing.Pool`` mapping over records that keep dict views (stdlib only).

Records holding a nuscenes-style config (``class_names = class_range.keys()``) fail every spawn
task with "cannot pickle 'dict_keys' object"; mpcompat pickles dict views (as views of a copy
of their dict), so the same map works.
"""
TITLE = "Pool(spawn).map over records whose config keeps class_names = class_range.keys()"
ORDER = 5
NEEDS = ()
TIMEOUT = 60


class EvalConfig(object):
    """The shape of nuscenes' DetectionConfig: class_names is a dict_keys view."""

    def __init__(self, class_range):
        self.class_range = class_range
        self.class_names = self.class_range.keys()


def count_in_range(record):
    """The work of one task: how many boxes of a record lie within their class's range."""
    token, distances, config = record
    return token, sum(1 for name in config.class_names
                      if distances.get(name, 1e9) <= config.class_range[name])


def run():
    """Map ``count_in_range`` over eight records with a two-process spawn Pool."""
    import multiprocessing
    config = EvalConfig({"car": 50, "truck": 50, "pedestrian": 40, "barrier": 30})
    records = [("sample-%d" % i, {"car": 10.0 * i, "pedestrian": 5.0 * i, "barrier": 45.0},
                config) for i in range(8)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        counts = dict(pool.map(count_in_range, records))
    return "%d records counted by 2 spawn workers (in range: %s); class_names %s" % (
        len(counts), sum(counts.values()), list(config.class_names))
