"""A spawn DataLoader whose dataset keeps a config with nuscenes-style ``dict_keys``.

mmdet3d, BEVFormer and UniAD datasets keep nuscenes' ``DetectionConfig`` (``class_names =
class_range.keys()``), so a spawn DataLoader cannot send them to its workers; with mpcompat
it can. The same shape, without nuScenes data.
"""
from mpcompat.demo.scenario_views_pool import EvalConfig

TITLE = "DataLoader(spawn) over a dataset whose config keeps class_names = class_range.keys()"
ORDER = 10
NEEDS = ("torch",)
TIMEOUT = 120


class InfoDataset(object):
    """A map-style dataset that keeps the config, as mmdet3d's NuScenesDataset does."""

    def __init__(self, config, n=8):
        self.config, self.n = config, n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        import torch
        return torch.tensor([index, len(self.config.class_names)])


def run():
    """Iterate a spawn DataLoader with two workers over the dataset."""
    import torch.utils.data as data
    config = EvalConfig({"car": 50, "truck": 50, "pedestrian": 40, "barrier": 30})
    loader = data.DataLoader(InfoDataset(config), batch_size=4, num_workers=2,
                             multiprocessing_context="spawn")
    return "%d batches from 2 spawn workers; class_names %s" % (
        len(list(loader)), list(config.class_names))
