"""The nuscenes-devkit patches, with whatever devkit is installed (1.1.11 on 3.8, 1.2.0 on 3.11).

Real configs from the devkit's own JSON files, real spawn children; no torch.
"""
import copy
import io
import json
import os
import pickle

import pytest

import mpcompat  # before nuscenes: its patches then apply as the devkit is imported
from nuscenes.eval.common.config import config_factory
from nuscenes.eval.detection import data_classes as detection
from nuscenes.eval.detection.config import config_factory as detection_factory
from nuscenes.eval.detection.data_classes import DetectionConfig
from nuscenes.eval.tracking import data_classes as tracking

import libs_workers
from testenv import child_env, run_python, run_race


def _json(module, name):
    path = os.path.join(os.path.dirname(module.__file__), "configs", name + ".json")
    with open(path) as f:
        return json.load(f)


DETECTION_JSON = _json(detection, "detection_cvpr_2019")
TRACKING_JSON = _json(tracking, "tracking_nips_2019")


def _plain_pickle(obj):
    """Pickle with an empty dispatch table: no copyreg reducer (none of mpcompat's) is used."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {}
    pickler.dump(obj)
    return buf.getvalue()


def _detection_configs():
    return {
        "__init__": DetectionConfig(**DETECTION_JSON),
        "deserialize": DetectionConfig.deserialize(DETECTION_JSON),
        "detection config_factory": detection_factory("detection_cvpr_2019"),
        "common config_factory": config_factory("detection_cvpr_2019"),
    }


def test_detection_class_names_is_a_list_in_class_range_order():
    assert detection.DetectionConfig is DetectionConfig  # patched in place: same class
    order = list(DETECTION_JSON["class_range"])
    for how, cfg in _detection_configs().items():
        assert type(cfg) is DetectionConfig, how
        assert type(cfg.class_names) is list and cfg.class_names == order, how
        assert cfg.serialize() == DETECTION_JSON, how
        assert cfg == DetectionConfig.deserialize(cfg.serialize()), how
        restored = pickle.loads(_plain_pickle(cfg))
        assert restored == cfg and restored.class_names == order, how


def test_detection_init_is_a_wrapt_function_wrapper_with_the_original_signature():
    import inspect
    import wrapt
    patched = DetectionConfig.__dict__["__init__"]
    assert isinstance(patched, wrapt.FunctionWrapper)
    assert patched.__wrapped__.__code__.co_filename == detection.__file__
    assert patched.__name__ == "__init__" and patched.__doc__ == patched.__wrapped__.__doc__
    signature = inspect.signature(DetectionConfig)
    assert list(signature.parameters) == list(
        inspect.signature(patched.__wrapped__).parameters)[1:]
    assert "class_range" in signature.parameters


def test_detection_patch_reverts_to_the_original_init_and_reapplies(restore_mpcompat):
    patched = DetectionConfig.__dict__["__init__"]
    original = patched.__wrapped__
    assert original.__code__.co_filename == detection.__file__
    mpcompat.deactivate()
    assert DetectionConfig.__dict__["__init__"] is original
    assert type(detection_factory("detection_cvpr_2019").class_names).__name__ == "dict_keys"
    with pytest.raises(TypeError, match="cannot pickle 'dict_keys' object"):
        _plain_pickle(DetectionConfig(**DETECTION_JSON))
    mpcompat.activate()
    assert DetectionConfig.__dict__["__init__"].__wrapped__ is original
    assert type(config_factory("detection_cvpr_2019").class_names) is list
    mpcompat.activate()  # idempotent: not wrapped twice
    assert DetectionConfig.__dict__["__init__"].__wrapped__ is original


def test_tracking_config_pickle_restores_the_module_state(monkeypatch):
    cfg = config_factory("tracking_nips_2019")
    assert cfg.serialize() == TRACKING_JSON
    data = pickle.dumps(cfg)
    assert b"mpcompat.rebuild" in data and b"rebuild_by_init" in data
    # What a fresh process has before any TrackingConfig.__init__ ran:
    monkeypatch.setattr(tracking, "TRACKING_NAMES", [])
    monkeypatch.setattr(tracking.TrackingMetricData, "nelem", None)
    restored = pickle.loads(data)
    assert restored == cfg and restored.__dict__ == cfg.__dict__
    assert tracking.TRACKING_NAMES == TRACKING_JSON["tracking_names"]
    assert tracking.TrackingMetricData.nelem == TRACKING_JSON["num_thresholds"]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(cfg, protocol)).__dict__ == cfg.__dict__
    assert copy.deepcopy(cfg).__dict__ == cfg.__dict__
    assert copy.copy(cfg).__dict__ == cfg.__dict__


def test_tracking_patch_reverts_and_reapplies(restore_mpcompat):
    cls = tracking.TrackingConfig
    assert "__reduce_ex__" in cls.__dict__
    mpcompat.deactivate()
    assert "__reduce_ex__" not in cls.__dict__
    assert b"mpcompat" not in pickle.dumps(config_factory("tracking_nips_2019"))
    mpcompat.activate()
    assert b"rebuild_by_init" in pickle.dumps(config_factory("tracking_nips_2019"))


def test_configs_work_in_a_spawn_child_as_in_this_process(spawn_pool):
    det = config_factory("detection_cvpr_2019")
    trk = config_factory("tracking_nips_2019")
    here = [tracking.TrackingBox(tracking_name=n, tracking_score=0.5).tracking_name
            for n in trk.tracking_names]
    view, result = spawn_pool.apply(libs_workers.call_each, ([
        (libs_workers.detection_view, (libs_workers.Holder(config=det),)),
        (libs_workers.tracking_box_after_unpickling, (pickle.dumps(trk),)),
    ],))
    assert view == ("list", list(DETECTION_JSON["class_range"]))
    assert result["accepted"] == here == TRACKING_JSON["tracking_names"]
    assert result["TRACKING_NAMES"] == TRACKING_JSON["tracking_names"]
    assert result["nelem"] == TRACKING_JSON["num_thresholds"]


_WITHOUT = """
import json, multiprocessing, sys
from nuscenes.eval.common.config import config_factory
from nuscenes.eval.tracking.data_classes import TrackingBox
import libs_workers
det, trk = config_factory("detection_cvpr_2019"), config_factory("tracking_nips_2019")
out = {"parent": TrackingBox(tracking_name=trk.tracking_names[0], tracking_score=0.5).tracking_name}
calls = [("detection", libs_workers.detection_view, libs_workers.Holder(config=det)),
         ("tracking", libs_workers.tracking_box, trk)]
with multiprocessing.get_context("spawn").Pool(1) as pool:
    for key, func, arg in calls:
        try:
            out[key] = "ok %r" % (pool.apply(func, (arg,)),)
        except Exception as exc:
            out[key] = "%s: %s" % (type(exc).__name__, exc)
out["mpcompat imported"] = "mpcompat" in sys.modules
print(json.dumps(out))
"""


def test_without_mpcompat_both_configs_fail_in_a_fresh_spawn_child():
    proc = run_python(_WITHOUT, env=child_env(MPCOMPAT_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    first = TRACKING_JSON["tracking_names"][0]
    assert out == {
        "parent": first,
        "detection": "TypeError: cannot pickle 'dict_keys' object",
        "tracking": "AssertionError: Error: Unknown tracking_name %s" % first,
        "mpcompat imported": False,
    }


class _OwnPickling(tracking.TrackingConfig):
    """A subclass with its own __reduce__: the patch must leave its pickling to it."""

    def __reduce__(self):
        return _rebuild_own, (self.serialize(),)


def _rebuild_own(content):
    return _OwnPickling.deserialize(content)


def test_tracking_subclass_with_its_own_reduce_keeps_it():
    cfg = _OwnPickling.deserialize(TRACKING_JSON)
    data = pickle.dumps(cfg)
    assert b"_rebuild_own" in data and b"rebuild_by_init" not in data
    assert type(pickle.loads(data)) is _OwnPickling


def test_tracking_patch_applied_and_reverted_by_threads_at_once():
    # What concurrent activate() and deactivate() calls do: apply() reads the class's pickling
    # hooks while another thread's revert() deletes ours.
    run_race("""
from nuscenes.eval.tracking import data_classes as module
from mpcompat.patches import nuscenes_tracking_config as patch
for rep in range(15):
    each([lambda i: patch.apply(module), lambda i: patch.revert(module)] * 3)
    patch.revert(module)
    assert "__reduce_ex__" not in module.TrackingConfig.__dict__
print("ok")
""")
