"""The opt-in patch ``mmdet.shared_infos`` (``MPCOMPAT_SHARED_INFOS=1``) on the UniAD stack's
mmdet (2.14.0, UniAD's pin; Python 3.8, torch 1.9.1, mmcv 1.4.0): a real ``CustomDataset``
subclass loading a real annotation file keeps ``data_infos`` as a shared list, and its fork and
spawn DataLoader workers read it without growing their private memory by the data's size.

mmcv 1.4.0 here is the "lite" build, without the compiled ops (``mmcv._ext``) that mmdet's
package imports; the script puts a module in their place whose functions raise if called
(nothing here calls them). mmdet3d 0.x is not installed here (a source distribution that needs
mmcv-full's compiled ops); its row, ``mmdet3d.shared_infos``, shares the implementation.
"""
import json
import pickle
import subprocess
import sys

import pytest

from testenv import child_env

SCRIPT = r'''
import json, os, sys, types

ext = types.ModuleType("mmcv._ext")  # a stand-in for mmcv-full's compiled ops (see the test)
def _op(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def op(*args, **kwargs):
        raise NotImplementedError("mmcv._ext.%s is not installed" % name)
    return op
ext.__getattr__ = _op
sys.modules["mmcv._ext"] = ext

import mmcv
import torch.utils.data as data
from mmdet.datasets import CustomDataset
import mpcompat
from shared_containers_helpers import memory


class Infos(CustomDataset):
    CLASSES = ("car", "person")


class Cycled(Infos):
    """A few infos read as often as the big dataset's: the same work, the same garbage
    collections (a fork worker's full collection copies the pages of every object it
    inherited), without the data."""

    def __init__(self, ann_file, pipeline, length):
        self.length = None
        super().__init__(ann_file, pipeline=pipeline)
        self.length = length

    def __len__(self):
        return self.length or len(self.data_infos)

    def __getitem__(self, idx):
        return super().__getitem__(idx % len(self.data_infos))


def measure(samples):
    """collate_fn: what the worker read, and its private memory after it."""
    return os.getpid(), [s["img_info"]["id"] for s in samples], memory()[0]


def workers(dataset, method):
    """Over two passes of 2 DataLoader workers: the largest private memory of a worker, and
    the most one grew by after its first batch."""
    loader = data.DataLoader(dataset, batch_size=1000, num_workers=2, collate_fn=measure,
                             multiprocessing_context=method, persistent_workers=True)
    seen, first, last = 0, {}, {}
    for _ in range(2):
        for pid, ids, dirty in loader:
            seen += len(ids)
            first.setdefault(pid, dirty)
            last[pid] = max(last.get(pid, 0), dirty)
    assert seen == 2 * len(dataset) and len(first) == 2
    return max(last.values()), max(last[pid] - first[pid] for pid in first)


if __name__ == "__main__":
    ann_file, small_file = sys.argv[1:3]
    dataset = Infos(ann_file, pipeline=[])
    infos = dataset.data_infos
    out = {"type": type(infos).__name__, "len": len(infos), "first": infos[0]["filename"],
           "states": {p.name: p.state for p in mpcompat.status().patches
                      if "shared_infos" in p.name}}
    if out["type"] != "list":
        try:
            infos.append({})
        except TypeError as exc:
            out["append"] = str(exc)
    for method in sys.argv[3:]:
        out[method] = workers(dataset, method)
    if "fork" in out:  # a few items read as often: the baseline of a fork worker
        out["fork_baseline"] = workers(Cycled(small_file, [], len(infos)), "fork")
    print(json.dumps(out))
'''


def _infos(n):
    import numpy as np
    return [{"filename": "img_%06d.jpg" % i, "width": 1600, "height": 900, "id": i,
             "ann": {"bboxes": np.full((3, 4), i, dtype=np.float32),
                     "labels": np.arange(3, dtype=np.int64)}} for i in range(n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import mmcv
    root = tmp_path_factory.mktemp("mmdet_infos")
    data = _infos(30000)
    mmcv.dump(data, str(root / "infos.pkl"))
    mmcv.dump(data[:100], str(root / "small.pkl"))
    script = root / "shared_infos.py"
    script.write_text(SCRIPT)
    return root, len(pickle.dumps(data, pickle.HIGHEST_PROTOCOL))


def _run(files, *methods, **env):
    root, _ = files
    done = subprocess.run([sys.executable, str(root / "shared_infos.py"), str(root / "infos.pkl"),
                           str(root / "small.pkl")] + list(methods), env=child_env(**env),
                          cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_data_infos_is_shared_and_workers_stay_flat(files):
    import mmdet
    assert mmdet.__version__ == "2.14.0"
    size = files[1]  # the pickled infos; the objects take more
    shared = _run(files, "fork", "spawn", MPCOMPAT_SHARED_INFOS="1")
    assert shared["type"] == "SharedList" and shared["len"] == 30000
    assert shared["first"] == "img_000000.jpg"
    assert shared["states"] == {"mmdet.shared_infos": "applied",
                                "mmdet3d.shared_infos": "waiting for import"}
    assert shared["append"].startswith("shared_list of 30,000 items is read-only: append()")
    (fork, _), (baseline, _) = shared["fork"], shared["fork_baseline"]
    assert fork - baseline < size / 5, (fork, baseline, size)
    worst, grew = shared["spawn"]
    assert grew < size / 5, (grew, size)
    # Without the variable the list stays a list, and each spawn worker holds its own copy.
    plain = _run(files, "spawn")
    assert plain["type"] == "list" and "append" not in plain
    assert plain["spawn"][0] - worst > size, (plain, shared, size)
