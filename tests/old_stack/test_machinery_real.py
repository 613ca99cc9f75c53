"""The patch machinery with a real library: nuscenes-devkit, whatever version is installed.

One fresh interpreter per test: the point is what happens while the devkit is first imported.
"""
import json
from importlib import metadata

from testenv import run_python

NUSCENES = "nuscenes-devkit %s" % metadata.version("nuscenes-devkit")

_SCRIPT = """
import importlib, json, warnings
import mpcompat
from mpcompat import patching
saved = patching.PATCHES


def changed(spec, **fields):  # the table is immutable: a table of the test's own, re-read
    values = {k: getattr(spec, k) for k in type(spec).FIELDS}
    values.update(fields)
    return type(spec)(**values)


patching.PATCHES = tuple(
    changed(s, supported=">=99") if s.name == "nuscenes.detection_config"  # out of range
    else changed(s, impl="patchkit.raising") if s.name == "nuscenes.tracking_config"  # raises
    else s for s in saved)
mpcompat.deactivate()
mpcompat.activate()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from nuscenes.eval.common.config import config_factory
    from nuscenes.eval.detection import data_classes
    from nuscenes.eval.tracking.data_classes import TrackingBox
    cfg = config_factory("detection_cvpr_2019")
    trk = config_factory("tracking_nips_2019")
    TrackingBox(tracking_name=trk.tracking_names[0], tracking_score=0.5)
out = {"warnings": [str(w.message) for w in caught
                    if issubclass(w.category, mpcompat.MpcompatWarning)],
       "class_names": type(cfg.class_names).__name__,
       "status": {p.name: [p.state, p.reason] for p in mpcompat.status().patches
                  if p.name.startswith("nuscenes.")}}

mpcompat.deactivate()
patching.PATCHES = saved
mpcompat.activate()   # the devkit is imported already: patched at once
out["reactivated"] = type(config_factory("detection_cvpr_2019").class_names).__name__
old = data_classes.DetectionConfig
importlib.reload(data_classes)
new = data_classes.DetectionConfig
kwargs = cfg.serialize()
out["reload"] = [new is not old, type(new(**kwargs).class_names).__name__,
                 type(old(**kwargs).class_names).__name__]
mpcompat.deactivate()
out["deactivated"] = [type(new(**kwargs).class_names).__name__,
                      type(old(**kwargs).class_names).__name__]
print(json.dumps(out))
"""


def test_failing_or_out_of_range_patches_never_break_the_devkit_import():
    proc = run_python(_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    # Older than tested: off, quietly (status says why); a patch that raises: one warning.
    skipped = "untested on %s; tested >=99: it stays off below the tested versions" % NUSCENES
    failed = "RuntimeError: boom: nuscenes.eval.tracking.data_classes changed shape"
    assert out["warnings"] == [
        "mpcompat: patch 'nuscenes.tracking_config' failed on %s and was skipped: %s"
        % (NUSCENES, failed),
    ]
    assert out["class_names"] == "dict_keys"
    assert out["status"] == {"nuscenes.detection_config": ["skipped", skipped],
                             "nuscenes.tracking_config": ["failed", failed]}
    assert out["reactivated"] == "list"
    assert out["reload"] == [True, "list", "list"]
    assert out["deactivated"] == ["dict_keys", "dict_keys"]
