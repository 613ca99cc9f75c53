"""Pickling a payload with no views: does having mpcompat active cost anything?

30,000 nuScenes-like info dicts (tokens, paths, numpy arrays for boxes, velocities and
calibrations, six cameras, nested sweeps lists; 9 arrays each), as mmdet3d's
``nuscenes_infos_*.pkl`` hold.
``pickle.dumps`` (protocol 5) with mpcompat active and deactivated, in the same process,
interleaved rounds. Target: active at most 1.02x deactivated (median of the per-round
ratios).
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

N_INFOS = 30000
PROTOCOL = 5
TARGET = 1.02
CAMERAS = ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT",
           "CAM_BACK_RIGHT"]
CLASSES = ["car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian",
           "motorcycle", "bicycle", "traffic_cone", "barrier"]


def make_infos(n=N_INFOS, seed=0):
    """``n`` info dicts shaped like mmdet3d's nuScenes infos (no dict views anywhere)."""
    import numpy as np

    rng = np.random.RandomState(seed)

    def token(i, salt):
        return "%016x%016x" % (i * 7919 + salt, i ^ salt)

    def sensor(i, name, salt, camera):
        entry = {
            "data_path": "./data/nuscenes/samples/%s/n008-2018-08-01__%s__%d.jpg"
                         % (name, name, 1533151603512404 + i),
            "type": name,
            "sample_data_token": token(i, salt),
            "sensor2ego_translation": [1.7, 0.01, 1.5],
            "sensor2ego_rotation": [0.5, -0.5, 0.5, -0.5],
            "ego2global_translation": [600.1 + i, 1647.5, 0.0],
            "ego2global_rotation": [0.57, -0.01, 0.01, -0.82],
            "timestamp": 1533151603512404 + i,
        }
        if camera:
            entry["cam_intrinsic"] = [[1266.4, 0.0, 816.3], [0.0, 1266.4, 491.5], [0.0, 0.0, 1.0]]
        else:
            entry["sensor2lidar_rotation"] = rng.rand(3, 3)
            entry["sensor2lidar_translation"] = rng.rand(3)
        return entry

    infos = []
    for i in range(n):
        n_boxes = int(rng.randint(0, 40))
        infos.append({
            "lidar_path": "./data/nuscenes/samples/LIDAR_TOP/n015-2018__LIDAR_TOP__%d.pcd.bin"
                          % (1533151603547590 + i),
            "token": token(i, 1),
            "sweeps": [sensor(i, "LIDAR_TOP", 100 + s, False) for s in range(2)],
            "cams": {cam: sensor(i, cam, 10 + c, True) for c, cam in enumerate(CAMERAS)},
            "lidar2ego_translation": [0.94, 0.0, 1.84],
            "lidar2ego_rotation": [0.70, -0.01, 0.01, -0.71],
            "ego2global_translation": [600.1 + i, 1647.5, 0.0],
            "ego2global_rotation": [0.57, -0.01, 0.01, -0.82],
            "timestamp": 1533151603547590 + i,
            "gt_boxes": rng.rand(n_boxes, 7),
            "gt_names": np.array([CLASSES[j % 10] for j in range(n_boxes)]),
            "gt_velocity": rng.rand(n_boxes, 2),
            "num_lidar_pts": rng.randint(0, 500, size=n_boxes),
            "valid_flag": rng.rand(n_boxes) > 0.1,
        })
    return infos


def run(quick=False):
    import mpcompat

    infos = make_infos()
    rounds = 3 if quick else 9

    def active():
        if not mpcompat.is_active():
            mpcompat.activate()
        return pickle.dumps(infos, PROTOCOL)

    def deactivated():
        if mpcompat.is_active():
            mpcompat.deactivate()
        return pickle.dumps(infos, PROTOCOL)

    was_active = mpcompat.is_active()
    try:
        assert active() == deactivated()  # same bytes: nothing here goes through mpcompat
        size = len(active())
        # activate()/deactivate() run inside the timed calls only when the state changes; time
        # them separately so that the comparison is of pickling alone
        times = interleaved({"active": active, "deactivated": deactivated}, rounds)
    finally:
        (mpcompat.activate if was_active else mpcompat.deactivate)()
    switch = interleaved({"activate": mpcompat.activate, "deactivate": mpcompat.deactivate}, 5)
    switch_cost = max(min(switch["activate"]), min(switch["deactivate"]))
    best = {k: min(v) - switch_cost for k, v in times.items()}
    med = {k: median(v) - switch_cost for k, v in times.items()}
    # each round times both, one right after the other: the median of the per-round ratios
    # cancels the slow drifts of a shared machine, which best-of and median alone do not
    paired = median([(a - switch_cost) / (d - switch_cost)
                     for a, d in zip(times["active"], times["deactivated"])])
    table = Table("Pickling %d nuScenes-like infos without views (protocol %d, %.0f MB)"
                  % (N_INFOS, PROTOCOL, size / 1e6),
                  ["mpcompat", "best", "median", "ratio (best)", "ratio (median)",
                   "ratio (median of paired rounds)", "target", "result"])
    table.add("deactivated", "%.1f ms" % (best["deactivated"] * 1e3),
              "%.1f ms" % (med["deactivated"] * 1e3), "1.000x", "1.000x", "1.000x", "", "")
    table.add("active", "%.1f ms" % (best["active"] * 1e3), "%.1f ms" % (med["active"] * 1e3),
              "%.3fx" % (best["active"] / best["deactivated"]),
              "%.3fx" % (med["active"] / med["deactivated"]), "**%.3fx**" % paired,
              "<= %.2fx" % TARGET, verdict(paired <= TARGET))
    table.notes.append("%d interleaved rounds in one process, gc off while timing; the cost "
                       "of switching (%.2f ms) is subtracted; the verdict uses the median of "
                       "the per-round ratios" % (rounds, switch_cost * 1e3))
    return [table]


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(t)
