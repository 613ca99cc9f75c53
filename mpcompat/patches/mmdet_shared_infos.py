"""Patches ``mmdet.shared_infos`` and ``mmdet3d.shared_infos`` (opt-in:
``MPCOMPAT_SHARED_INFOS=1``): a dataset's ``data_infos`` list becomes a
:func:`mpcompat.shared_list` (issue 37).

mmdet 2.x's ``CustomDataset`` and mmdet3d 0.x's ``Custom3DDataset`` (the base of the nuScenes
datasets of BEVFormer and UniAD) keep their annotations as ``self.data_infos``, a list of
dicts that grows in every DataLoader worker (copy-on-write under fork, a whole copy per worker
under spawn and forkserver). Their ``__init__`` is wrapped in place (wrapt); after it, a
``data_infos`` that is a list becomes a shared list with the same items. ``__init__``'s own
changes to the list (mmdet's ``_filter_imgs`` makes a new one) happen before; writes after it
raise ``TypeError`` naming the shared list.
"""
from mpcompat.patcher import Patcher, Skip

CLASSES = {"mmdet.datasets.custom": "CustomDataset",
           "mmdet3d.datasets.custom_3d": "Custom3DDataset"}
patcher = Patcher()


def apply(module):
    """Wrap the ``__init__`` of ``module``'s base dataset class."""
    name = CLASSES.get(module.__name__)
    cls = getattr(module, name or "", None)
    if not isinstance(cls, type) or "__init__" not in cls.__dict__:
        raise Skip("%s has no %s with an __init__ of its own" % (module.__name__, name))
    patcher.wrap(cls, "__init__", _init_wrapper)


def revert(module):
    """Put back the original ``__init__``, where nobody has replaced it since."""
    patcher.restore(module)


def _init_wrapper(wrapped, instance, args, kwargs):
    """Run the original ``__init__``, then share a list ``data_infos``."""
    wrapped(*args, **kwargs)
    infos = getattr(instance, "__dict__", {}).get("data_infos")
    if type(infos) is list:
        from mpcompat.shared_containers import shared_list
        instance.data_infos = shared_list(infos)
