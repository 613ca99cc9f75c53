"""mpcompat: PyTorch-style multiprocessing that just works under spawn and forkserver.

Importing this package activates it (unless ``MPCOMPAT_DISABLE=1``): dict views and modules
pickle, and known library bugs are patched when those libraries are imported.
"""
__version__ = "0.1.0"

# Loaded on first use (PEP 562), so that activation stays cheap.
_LAZY = {name: module for module, names in (
    ("mpcompat.reducers", "register unregister registered registering reducer"),
    ("mpcompat.diagnose", "explain assert_picklable"),
    ("mpcompat.pickling.per_process", "per_process"),
    ("mpcompat.errors", "MpcompatWarning PatchUnavailable BrokenPool WorkerLostError"),
    ("mpcompat.shared_containers", "shared_list shared_dict"),
) for name in names.split()}

__all__ = ["activate", "deactivate", "is_active", "status"] + list(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'mpcompat' has no attribute %r" % name)
    value = globals()[name] = getattr(__import__(module, fromlist=[name]), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def status():
    """Return a :class:`mpcompat.report.Status` of this process; ``str()`` of it reads well."""
    from mpcompat.report import Status
    return Status()


# (Not "from mpcompat import ..." while this package is being imported: on Python 3.8 that takes
# the package's import lock again, and a thread waiting for it meanwhile, one whose first import
# of what pickles activates mpcompat, can spin in importlib forever: bpo-38091.)
from mpcompat.activation import activate, activate_on_import, deactivate, is_active  # noqa

activate_on_import()
del activate_on_import  # (not part of the API)
