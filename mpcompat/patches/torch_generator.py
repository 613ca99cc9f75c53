"""Patch ``torch.generator``: a ``torch.Generator`` reaches spawn children with its state.

``torch.Generator.__reduce__`` (added by pytorch#126271 in 2024) ships its state as a fresh uint8
tensor. In ``ForkingPickler`` torch shares that tensor's storage through a file descriptor
(``reduce_storage`` in torch/multiprocessing/reductions.py), and when a ``Process`` is started
with ``spawn`` or ``forkserver`` multiprocessing only notes the descriptor's number
(``duplicate_for_child``): the temporary tensor, and its descriptor, are gone before the child
starts, and the child dies in ``rebuild_storage_fd`` with "unable to resize file <filename not
specified> to the right size" (pytorch#146828). Older torch cannot pickle a Generator at all.

This patch registers, for ``ForkingPickler`` only, a reducer that ships the device, the
initial seed and the state as bytes; plain ``pickle``, ``copy`` and ``torch.save`` keep
torch's own ``__reduce__``.
"""
from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

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
    # The package first: importing multiprocessing.reduction while another thread is still
    # initializing the multiprocessing package can deadlock inside CPython (they import each
    # other); importing the package waits for that thread instead.
    import multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler
    current = ForkingPickler._extra_reducers.get(cls, reduce_generator)
    if current is not reduce_generator:
        raise Skip("ForkingPickler already has a reducer for torch.Generator: %r" % (current,))
    patcher.replace_item(ForkingPickler._extra_reducers, cls, reduce_generator, module.__name__)


def revert(module):
    """Remove :func:`reduce_generator` from ForkingPickler if it is still the one there."""
    patcher.restore(module)
