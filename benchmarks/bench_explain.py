"""Benchmark ``mpcompat.explain`` on a nuScenes-scale dataset object.

30,000 info dicts shaped like mmdet3d's nuScenes infos (numpy arrays for boxes, calibration
and sweeps) inside a dataset object with a transform pipeline. Timed: one ``pickle.dumps`` of
the clean dataset (the reference), ``explain`` of the clean dataset, and ``explain`` of the same
dataset with one offender (a lock) deep inside one info dict. Targets: clean <= 1.5x,
one offender <= 5x the reference. Run: ``python benchmarks/bench_explain.py [--quick]`` or
through ``benchmarks/run.py explain``.
"""
import argparse
import os
import pickle
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from _common import print_tables, Table, fmt_ms, interleaved, verdict  # noqa: E402

N_INFOS = 30000
TARGET_CLEAN = 1.5
TARGET_DIRTY = 5.0

CAMS = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT",
        "CAM_BACK_RIGHT")
NAMES = ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle",
         "bicycle", "traffic_cone", "barrier")


class Compose(object):
    """A transform pipeline, as mmcv's Compose."""

    def __init__(self, transforms):
        self.transforms = transforms


class LoadPoints(object):
    """A pipeline step with a little configuration."""

    def __init__(self, coord_type="LIDAR", load_dim=5, use_dim=(0, 1, 2, 3, 4)):
        self.coord_type, self.load_dim, self.use_dim = coord_type, load_dim, list(use_dim)


class NuScenesLikeDataset(object):
    """The shape of mmdet3d's NuScenesDataset: infos, a pipeline, class names, a config."""

    def __init__(self, infos):
        self.data_infos = infos
        self.CLASSES = NAMES
        self.pipeline = Compose([LoadPoints(), LoadPoints(load_dim=4), LoadPoints(use_dim=(0,))])
        self.eval_detection_configs = {"class_range": {name: 50 for name in NAMES},
                                       "dist_ths": [0.5, 1.0, 2.0, 4.0]}


def make_infos(n, seed=0):
    """Return ``n`` nuScenes-like info dicts."""
    import numpy as np
    rng = np.random.RandomState(seed)
    infos = []
    for i in range(n):
        boxes = int(rng.randint(5, 40))
        token = "%032x" % rng.randint(0, 2 ** 62)
        infos.append({
            "lidar_path": "./data/nuscenes/samples/LIDAR_TOP/n015-2018-07-24__%06d.pcd.bin" % i,
            "token": token,
            "timestamp": 1532402927647951 + i,
            "sweeps": [{"data_path": "./data/nuscenes/sweeps/LIDAR_TOP/%s_%d.pcd.bin" % (token, s),
                        "sample_data_token": token[::-1],
                        "sensor2lidar_rotation": rng.rand(3, 3),
                        "sensor2lidar_translation": rng.rand(3),
                        "timestamp": 1532402927647951 + i - s} for s in range(3)],
            "cams": {cam: {"data_path": "./data/nuscenes/samples/%s/%s.jpg" % (cam, token),
                           "sensor2lidar_rotation": rng.rand(3, 3),
                           "sensor2lidar_translation": rng.rand(3),
                           "cam_intrinsic": rng.rand(3, 3),
                           "timestamp": 1532402927647951 + i} for cam in CAMS},
            "lidar2ego_translation": [0.98, 0.0, 1.84],
            "lidar2ego_rotation": [0.706, -0.015, 0.017, -0.707],
            "ego2global_translation": list(rng.rand(3) * 1000),
            "ego2global_rotation": list(rng.rand(4)),
            "gt_boxes": rng.rand(boxes, 7),
            "gt_names": np.array([NAMES[k % 10] for k in range(boxes)]),
            "gt_velocity": rng.rand(boxes, 2),
            "num_lidar_pts": rng.randint(0, 500, boxes),
            "num_radar_pts": rng.randint(0, 10, boxes),
            "valid_flag": rng.rand(boxes) > 0.1,
        })
    return infos


def run(quick=False, infos=N_INFOS):
    """Time pickle.dumps and explain (clean, one offender); return a list of one Table."""
    import mpcompat
    if not mpcompat.is_active():
        mpcompat.activate()
    rounds = 1 if quick else 3
    dataset = NuScenesLikeDataset(make_infos(infos))
    where = infos * 2 // 3
    cam = dataset.data_infos[where]["cams"]["CAM_BACK"]
    reports = {}

    def explain_dirty():
        cam["reader_lock"] = threading.Lock()
        try:
            reports["dirty"] = mpcompat.explain(dataset, "dataset")
        finally:
            del cam["reader_lock"]

    def explain_clean():
        reports["clean"] = mpcompat.explain(dataset, "dataset")

    size = len(pickle.dumps(dataset))
    times = interleaved({"pickle": lambda: pickle.dumps(dataset), "clean": explain_clean,
                         "dirty": explain_dirty}, rounds)
    assert reports["clean"].ok, str(reports["clean"])
    assert [p.path for p in reports["dirty"].problems] == [
        "dataset.data_infos[%d]['cams']['CAM_BACK']['reader_lock']" % where], str(reports["dirty"])
    best = {name: min(t) for name, t in times.items()}
    table = Table("explain() on a nuScenes-scale dataset (%d info dicts with numpy arrays, "
                  "%.0f MB pickled)" % (infos, size / 1e6),
                  ["case", "best", "vs one pickle.dumps", "target", "result"])
    table.add("pickle.dumps, no offender (reference)", fmt_ms(best["pickle"], 0), "1.00x",
              "", "")
    for name, label, target in (("clean", "explain, no offender", TARGET_CLEAN),
                                ("dirty", "explain, one offender deep inside", TARGET_DIRTY)):
        ratio = best[name] / best["pickle"]
        table.add(label, fmt_ms(best[name], 0), "%.2fx" % ratio, "<= %.1fx" % target,
                  verdict(ratio <= target))
    table.notes.append("%d interleaved round(s), best of each, gc off while timing; the offender "
                       "(a threading.Lock) sits at dataset.data_infos[%d]['cams']['CAM_BACK']"
                       % (rounds, where))
    return [table]


def main(argv=None):
    """Print the table; return 0 when both targets are met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--infos", type=int, default=N_INFOS)
    parser.add_argument("--quick", action="store_true", help="one round instead of three")
    args = parser.parse_args(argv)
    tables = run(quick=args.quick, infos=args.infos)
    return print_tables(tables)


if __name__ == "__main__":
    sys.exit(main())
