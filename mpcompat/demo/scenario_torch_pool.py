"""torch.multiprocessing.spawn with a model that keeps ``F.adaptive_max_pool2d`` as an attribute.

Made by torch's ``boolean_dispatch``, the function's qualname is ``boolean_dispatch.<locals>.fn``:
"Can't pickle local object" without mpcompat, which pickles it by name. The first report's case.
"""
import os

TITLE = "torch.multiprocessing.spawn(fn, args=(model,)) where model.pool = F.adaptive_max_pool2d"
ORDER = 20
NEEDS = ("torch",)
TIMEOUT = 120


def worker(rank, model, x, outdir):
    """The spawned function: run the model and its pooling; save the output for the parent."""
    import torch
    with torch.no_grad():
        torch.save(model.pool(model(x), (2, 2)), os.path.join(outdir, "%d.pt" % rank))


def run():
    """Spawn two processes that each run the model; compare their outputs with the parent's."""
    import tempfile

    import torch
    import torch.multiprocessing as mp
    torch.manual_seed(0)
    # Any nn.Module with the function as an attribute will do; no class of our own, so that
    # listing the scenarios does not import torch.
    model = torch.nn.Conv2d(1, 4, 3)
    model.pool = torch.nn.functional.adaptive_max_pool2d
    x = torch.randn(1, 1, 10, 10)
    with torch.no_grad():
        expected = model.pool(model(x), (2, 2))
    with tempfile.TemporaryDirectory() as outdir:
        mp.spawn(worker, args=(model, x, outdir), nprocs=2)
        outputs = [torch.load(os.path.join(outdir, "%d.pt" % rank)) for rank in range(2)]
    if not all(torch.equal(out, expected) for out in outputs):
        raise AssertionError("a spawned process computed a different output")
    return "2 spawned processes got the model and computed the parent's output %s" % (
        tuple(expected.shape),)
