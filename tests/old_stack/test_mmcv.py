"""Module objects kept by mmcv configs, with whatever mmcv is installed.

Before mmcv 1.4.8, ``Config.fromfile`` keeps the modules a config file imports: with ``_base_``
loading itself fails (its ``copy.deepcopy`` of the file's variables), without it the Config
cannot be sent to a spawn child. From 1.4.8 on (1.7.2 here) mmcv leaves modules out itself.
"""
import json
import os
import pickle

import pytest

import mpcompat  # noqa: F401  (active: module objects pickle as references)
import mmcv
from mmcv import Config
from mpcompat.patching import parse

import libs_workers
from testenv import child_env, run_python

KEEPS_MODULES = parse(mmcv.__version__) < (1, 4, 8)
BASE = "model = dict(type='ResNet', depth=50)\n"
WITH_BASE = """import numpy as np
import os.path as osp
_base_ = ['./base.py']
lr = float(np.sqrt(4e-4))
work_dir = osp.join('work_dirs', 'demo')
"""
WITHOUT_BASE = WITH_BASE.replace("_base_ = ['./base.py']", "model = dict(type='ResNet', depth=50)")


@pytest.fixture
def config_files(tmp_path):
    """Write a config with ``_base_`` and one without; both import modules."""
    (tmp_path / "base.py").write_text(BASE)
    (tmp_path / "with_base.py").write_text(WITH_BASE)
    (tmp_path / "without_base.py").write_text(WITHOUT_BASE)
    return [str(tmp_path / "with_base.py"), str(tmp_path / "without_base.py")]


def test_config_keeping_modules_reaches_a_spawn_child(config_files, spawn_pool):
    configs = [Config.fromfile(path) for path in config_files]
    kept = {"np": ("numpy", True), "osp": (os.path.__name__, True)} if KEEPS_MODULES else {}
    for cfg in configs:
        assert ("np" in cfg) == KEEPS_MODULES
        restored = pickle.loads(pickle.dumps(cfg))
        assert restored.get("np") is cfg.get("np") and restored.lr == cfg.lr
    summaries = spawn_pool.apply(libs_workers.call_each, (
        [(libs_workers.config_summary, (cfg,)) for cfg in configs],))
    for summary in summaries:
        assert summary == {"lr": 0.02, "model": "ResNet", "depth": 50, "modules": kept}


_WITHOUT = """
import json, sys
from multiprocessing.reduction import ForkingPickler
from mmcv import Config
out = {}
for path in sys.argv[1:]:
    try:
        ForkingPickler.dumps(Config.fromfile(path))   # what a spawn start sends
        out[path] = "ok"
    except Exception as exc:
        out[path] = "%s: %s" % (type(exc).__name__, exc)
out["mpcompat imported"] = "mpcompat" in sys.modules
print(json.dumps(out))
"""


def test_without_mpcompat_only_old_mmcv_fails(config_files):
    proc = run_python(_WITHOUT, *config_files, env=child_env(MPCOMPAT_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    expected = "TypeError: cannot pickle 'module' object" if KEEPS_MODULES else "ok"
    assert out == {config_files[0]: expected, config_files[1]: expected,
                   "mpcompat imported": False}
