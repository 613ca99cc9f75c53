"""torch, nuscenes-devkit and multiprocessing targets imported from eight threads at once, in
fresh interpreters, many times with different timings (issue: a patch left "skipped" for good,
a false "torch.Generator has no get_state" warning): every patch applies exactly once, with no
warning, in every run.
"""
from concurrent_imports_check import check, run_many

TARGETS = ["torch", "multiprocessing.reduction", "multiprocessing.spawn",
           "concurrent.futures.process", "nuscenes.eval.detection.data_classes",
           "nuscenes.eval.tracking.data_classes", "multiprocessing.pool"]
# No torch submodule besides torch itself: importing torch and, say, torch.utils.data from two
# threads at once crashes or fails inside torch even without mpcompat (its circular imports
# meet CPython's per-module import locks).


def test_every_patch_applies_exactly_once_with_torch_and_nuscenes():
    outputs = run_many(range(10), TARGETS)
    for seed, out in outputs:
        check(seed, out)
    rows = outputs[0][1]["rows"]
    assert rows["torch.generator"][:2] == ["applied", 1]
    assert rows["torch.boolean_dispatch"][:2] == ["applied", 1]
    assert rows["nuscenes.detection_config"][:2] == ["applied", 1]
