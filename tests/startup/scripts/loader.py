"""A user script that never imports mpcompat: a DataLoader worker gets a dataset holding a
dict_keys view (as nuscenes' DetectionConfig.class_names) and says what it received.

Under fork the dataset is not pickled and all works without mpcompat; under spawn it fails
without mpcompat. Items are plain lists: a worker whose item cannot be pickled would leave the
loader waiting (pytorch#142884), hence also the loader's timeout.

argv[1] is the DataLoader's multiprocessing_context, or "default" to leave it unset (the
script then never chooses a start method). Prints a JSON report.
"""
import json
import multiprocessing
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class ConfigDataset(Dataset):
    """Keeps ``class_range.keys()``, the way DetectionConfig does."""

    def __init__(self):
        self.class_range = {"car": 50, "pedestrian": 40}
        self.class_names = self.class_range.keys()

    def __len__(self):
        return 2

    def __getitem__(self, index):
        mod = sys.modules.get("mpcompat")
        return [type(self.class_names).__name__, list(self.class_names),
                bool(mod is not None and mod.is_active())]


def main():
    context = None if sys.argv[1] == "default" else sys.argv[1]
    report = {"default_start_method": multiprocessing.get_start_method(allow_none=True),
              "torch_start_method": torch.multiprocessing.get_start_method()}
    try:
        loader = DataLoader(ConfigDataset(), batch_size=None, num_workers=1,
                            multiprocessing_context=context, timeout=120)
        items = list(loader)
        report["result"] = [[kind, names] for kind, names, _ in items]
        report["worker_active"] = [active for _, _, active in items]
    except Exception as exc:
        report["error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
