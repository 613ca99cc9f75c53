"""The UniAD stack (Python 3.8, torch 1.9.1, mmcv 1.4.0, nuscenes-devkit 1.1.11) imports with
mpcompat active without a word from mpcompat, in the parent and in spawn DataLoader workers,
under ``-W error``: a patch whose target predates its bug is "not needed", silently."""
import json
import subprocess
import sys

from testenv import child_env

SCRIPT = '''
import json
import mpcompat
import torch, mmcv
from nuscenes.eval.detection.data_classes import DetectionConfig
from nuscenes.eval.tracking.data_classes import TrackingConfig
from nuscenes.eval.common.config import config_factory
import torch.utils.data as data


class Dataset(object):
    def __init__(self):
        self.cfg = config_factory("detection_cvpr_2019")

    def __len__(self):
        return 4

    def __getitem__(self, index):
        import mmcv, nuscenes.eval.tracking.data_classes  # the workers import them too
        return len(self.cfg.class_names) + index


if __name__ == "__main__":
    loader = data.DataLoader(Dataset(), batch_size=None, num_workers=2,
                             multiprocessing_context="spawn")
    print(sorted(int(x) for x in loader))
    print(json.dumps({p.name: p.state for p in mpcompat.status().patches}))
'''


def _run(tmp_path, **env):
    script = tmp_path / "uniad_like.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-W", "error", str(script)], env=child_env(**env),
                          cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)


def test_importing_the_old_stack_says_nothing(tmp_path):
    import torch
    assert torch.__version__.startswith("1.9.1")
    quiet = _run(tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    loaded, rows = quiet.stdout.splitlines()[-2:]  # (mmcv may print a CUDA_HOME line first)
    assert loaded == "[10, 11, 12, 13]"
    states = json.loads(rows)
    assert states["torch.safe_globals"] == "not needed"
    assert states["torch.boolean_dispatch"] == states["nuscenes.detection_config"] == "applied"
    assert "mpcompat" not in quiet.stderr.lower()
    # Whatever else is on stderr comes from the libraries themselves (mmcv's import of
    # torch.utils.cpp_extension notes the missing CUDA runtime), as without mpcompat.
    without = _run(tmp_path, MPCOMPAT_DISABLE="1")
    assert without.returncode == 1  # the workers cannot get the dict_keys view
    assert set(quiet.stderr.splitlines()) <= set(without.stderr.splitlines())
