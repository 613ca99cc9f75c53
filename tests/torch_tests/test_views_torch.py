"""Dict views through torch: DataLoader workers under spawn and forkserver (persistent workers
over two epochs), and torch.save / torch.load(weights_only=False)."""
import io
import os
from collections import OrderedDict

import pytest
import torch
from torch.utils.data import DataLoader

import mpcompat
import workers
from workers import VIEW_KINDS, canon, make_view

N = 8
TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
# torch 2.6+ loads weights only unless told otherwise; torch < 1.13 has no weights_only and
# loads any pickle.
LOAD_ANY = {"weights_only": False} if TORCH_2 else {}


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_dataloader_workers_get_and_return_views(context):
    """One DataLoader per start method: num_workers=2, persistent_workers=True, two epochs.

    The dataset (with its views) is pickled to both workers when the first epoch starts; the
    samples the workers return hold views too; the second epoch reuses the same workers.
    """
    assert mpcompat.is_active()
    dataset = workers.ViewDataset(N)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context=context,
                        persistent_workers=True, collate_fn=workers.collate_as_list)
    epochs = []
    try:
        for _ in range(2):
            epochs.append([sample for batch in loader for sample in batch])
    finally:
        del loader  # shuts the persistent workers down
    pids_per_epoch = []
    for samples in epochs:
        assert [s["index"] for s in samples] == list(range(N))
        for s in samples:
            assert type(s["class_names"]) is type(OrderedDict().keys())
            assert list(s["class_names"]) == ["car", "truck", "pedestrian"]
            assert s["seen"] == canon(dataset.views)
            assert type(s["made_here"]) is type({}.items())
            assert list(s["made_here"]) == [(s["index"], str(s["index"]))]
        pids = {s["pid"] for s in samples}
        assert os.getpid() not in pids and len(pids) <= 2
        pids_per_epoch.append(pids)
    assert pids_per_epoch[0] == pids_per_epoch[1]  # persistent: same workers both epochs


def _payload():
    inner = {"car": 50, "truck": 40}
    return {
        "weights": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "views": [make_view(kind, [("a", torch.ones(2)), ("b", [1, "\u00fc"])])
                  for kind in VIEW_KINDS],
        "config": {"class_range": inner, "class_names": inner.keys()},
        "of_views": {"k": inner.keys(), "v": inner.values()}.items(),
    }


def _tensor_leaf(obj):
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), obj.tolist())
    return obj


def _canon_tensors(obj):
    """canon() with tensors compared by dtype and values."""
    return canon(obj, _tensor_leaf)


@pytest.mark.parametrize("zipfile", [True, False])
def test_torch_save_and_load(zipfile):
    obj = _payload()
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zipfile)
    buf.seek(0)
    loaded = torch.load(buf, **LOAD_ANY)
    assert _canon_tensors(loaded) == _canon_tensors(obj)
    for kind, view in zip(VIEW_KINDS, loaded["views"]):
        assert type(view).__name__ == kind
    assert "tensor" in repr(_canon_tensors(loaded))  # the tensors were compared as values
