"""A spawn DataLoader over a dataset that keeps an mmcv Config and a module object.

Before mmcv 1.4.8 ``Config.fromfile`` keeps the modules a config imports; datasets keep module
objects too (this one, its annotation parser). Both fail with "cannot pickle 'module' object"
once mmcv's ``init_dist`` has chosen spawn; mpcompat pickles modules by name.
"""
TITLE = ("DataLoader(spawn) over a dataset keeping an mmcv Config (modules kept before mmcv "
         "1.4.8) and a module attribute")
ORDER = 50
NEEDS = ("mmcv", "torch")
TIMEOUT = 120

BASE = "model = dict(type='ResNet', depth=50)\n"
CONFIG = """import numpy as np
_base_ = ['./base.py']
data = dict(samples=8, parser='json')
lr = float(np.sqrt(4e-4))
"""


class AnnotationDataset(object):
    """Keeps its Config and, as an attribute, the module named by ``cfg.data.parser``."""

    def __init__(self, cfg):
        import importlib
        self.cfg = cfg
        self.parser = importlib.import_module(cfg.data.parser)

    def __len__(self):
        return self.cfg.data.samples

    def __getitem__(self, index):
        record = self.parser.dumps({"index": index, "model": self.cfg.model.type})
        return self.parser.loads(record)["index"]


def run(workers=2):
    """Load the dataset in spawn workers; report what the Config kept."""
    import os
    import tempfile

    import mmcv
    from mpcompat.demo.scenario_nuscenes import load_in_spawn_workers
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("base.py", BASE), ("config.py", CONFIG)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        cfg = mmcv.Config.fromfile(os.path.join(tmp, "config.py"))
    items = load_in_spawn_workers(AnnotationDataset(cfg), workers)
    kept = sorted(k for k, v in cfg.items() if type(v) is type(mmcv))
    return "items %s from %d spawn workers; mmcv %s Config keeps modules: %s" % (
        sorted(int(i) for i in items), workers, mmcv.__version__, ", ".join(kept) or "none")
