"""A torch DataLoader under spawn whose dataset keeps nuscenes-style ``dict_keys`` in a config.

nuscenes-devkit's ``DetectionConfig`` stores ``class_names = class_range.keys()``; mmdet3d,
BEVFormer and UniAD datasets keep that config, so a spawn DataLoader cannot send the dataset to
its workers. This scenario builds the same shape without needing nuScenes data.
"""
TITLE = "DataLoader(spawn) over a dataset whose config keeps class_names = class_range.keys()"
ORDER = 10
NEEDS = ("torch",)
TIMEOUT = 120


class DetectionLikeConfig(object):
    """The shape of nuscenes' DetectionConfig: class_names is a dict_keys view."""

    def __init__(self, class_range):
        self.class_range = class_range
        self.class_names = self.class_range.keys()


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
    config = DetectionLikeConfig({"car": 50, "truck": 50, "pedestrian": 40, "barrier": 30})
    loader = data.DataLoader(InfoDataset(config), batch_size=4, num_workers=2,
                             multiprocessing_context="spawn")
    batches = [batch for batch in loader]
    return "%d batches from 2 spawn workers; class_names %s" % (
        len(batches), list(config.class_names))
