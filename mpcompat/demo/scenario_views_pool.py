"""A spawn ``multiprocessing.Pool`` mapping over records that keep dict views.

nuscenes-devkit's ``DetectionConfig`` sets ``class_names = class_range.keys()``; evaluation
code that splits its work over a Pool sends records holding such a config to the workers, and
under spawn (the default on macOS and Windows, and for CUDA users) every task fails with
"TypeError: cannot pickle 'dict_keys' object". With mpcompat, dict views pickle (as views of a
copy of their dict), so the same map works. Standard library only.
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


class SampleRecord(object):
    """One sample to evaluate, with the evaluation config it was made with."""

    def __init__(self, token, distances, config):
        self.token, self.distances, self.config = token, distances, config


def count_in_range(record):
    """The work of one task: how many boxes of each class lie within that class's range."""
    config = record.config
    return record.token, sum(1 for name in config.class_names
                             if record.distances.get(name, 1e9) <= config.class_range[name])


def run():
    """Map ``count_in_range`` over eight records with a two-process spawn Pool."""
    import multiprocessing
    config = EvalConfig({"car": 50, "truck": 50, "pedestrian": 40, "barrier": 30})
    records = [SampleRecord("sample-%d" % i, {"car": 10.0 * i, "pedestrian": 5.0 * i,
                                              "barrier": 45.0}, config) for i in range(8)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        counts = dict(pool.map(count_in_range, records))
    return "%d records counted by 2 spawn workers (in range: %s); class_names %s" % (
        len(counts), sum(counts.values()), list(config.class_names))
