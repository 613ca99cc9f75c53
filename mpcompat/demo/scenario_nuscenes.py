"""A spawn DataLoader over a nuScenes dataset that keeps the devkit's evaluation configs.

As mmdet3d's ``NuScenesDataset`` does, so "cannot pickle 'dict_keys' object" (nuscenes-devkit
#1155); past that, a fresh worker's tracking config has no ``TRACKING_NAMES`` and every
``TrackingBox`` fails with "Unknown tracking_name". mpcompat fixes both. No nuScenes data needed.
"""
TITLE = ("DataLoader(spawn) over a dataset keeping nuscenes config_factory('detection_cvpr_2019')"
         " and the tracking config")
ORDER = 30
NEEDS = ("nuscenes",)
TIMEOUT = 120


class NuScenesEvalDataset(object):
    """Keeps the evaluation configs as mmdet3d's NuScenesDataset does; items use both."""

    def __init__(self, n=8):
        from nuscenes.eval.common.config import config_factory
        self.eval_detection_configs = config_factory("detection_cvpr_2019")
        self.eval_tracking_configs = config_factory("tracking_nips_2019")
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        from nuscenes.eval.tracking.data_classes import TrackingBox
        names = self.eval_tracking_configs.tracking_names
        box = TrackingBox(tracking_name=names[index % len(names)], tracking_score=0.5)
        return index, len(self.eval_detection_configs.class_names), box.tracking_name


def load_in_spawn_workers(dataset, workers=2):
    """Return every item of ``dataset`` as loaded by spawn workers (DataLoader, else a Pool)."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            return pool.map(dataset.__getitem__, range(len(dataset)))
    return list(DataLoader(dataset, batch_size=None, num_workers=workers,
                           multiprocessing_context="spawn"))


def run(workers=2):
    """Load the dataset in spawn workers; report what they built."""
    dataset = NuScenesEvalDataset()
    items = load_in_spawn_workers(dataset, workers)
    boxes = sorted({item[2] for item in items})
    return "%d items from %d spawn workers; %d detection classes; tracking boxes %s" % (
        len(items), workers, len(dataset.eval_detection_configs.class_names), ", ".join(boxes))
