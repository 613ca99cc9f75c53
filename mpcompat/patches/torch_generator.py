"""Patch ``torch.generator``: a ``torch.Generator`` reaches spawn children with its state.

Torch's own reduction shares the state through a file descriptor that is gone before a spawn
child starts (pytorch#146828). For ``ForkingPickler`` only, a reducer ships the device, the
initial seed and the state as bytes; ``pickle``, ``copy`` and ``torch.save`` keep torch's own.
"""
from mpcompat.patcher import Patcher, Skip

patcher = Patcher()


def reduce_generator(gen):
    """Reduce a ``torch.Generator`` to its device, initial seed and state bytes."""
    from mpcompat.rebuild import rebuild_torch_generator  # loaded with the first generator sent
    return rebuild_torch_generator, (str(gen.device), gen.initial_seed(),
                                     bytes(gen.get_state().tolist()))


def apply(module):
    """Register :func:`reduce_generator` for ``module.Generator`` in ForkingPickler."""
    cls = getattr(module, "Generator", None)
    if cls is None or not hasattr(cls, "get_state"):
        raise Skip("torch.Generator has no get_state")
    # The package first: importing multiprocessing.reduction while another thread initializes
    # the package can deadlock (they import each other); this waits for that thread instead.
    import multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler
    current = ForkingPickler._extra_reducers.get(cls, reduce_generator)
    if current is not reduce_generator:
        raise Skip("ForkingPickler already has a reducer for torch.Generator: %r" % (current,))
    patcher.replace_item(ForkingPickler._extra_reducers, cls, reduce_generator, module.__name__)


def revert(module):
    """Remove :func:`reduce_generator` from ForkingPickler if it is still the one there."""
    patcher.restore(module)
