"""mpcompat: PyTorch-style multiprocessing that just works under spawn and forkserver.

Importing this package activates it (unless ``MPCOMPAT_DISABLE=1``): dict views and modules
pickle, and known library bugs are patched when those libraries are imported.
"""
__version__ = "0.1.0"

__all__ = [
    "activate", "deactivate", "is_active", "status",
    "register", "unregister", "registered", "registering", "reducer",
    "explain", "assert_picklable", "per_process",
    "MpcompatWarning", "PatchUnavailable", "BrokenPool", "WorkerLostError",
]

# Loaded on first use (PEP 562), so that activation stays cheap.
_LAZY = {
    "register": "mpcompat.pickling.registry",
    "unregister": "mpcompat.pickling.registry",
    "registered": "mpcompat.pickling.registry",
    "registering": "mpcompat.pickling.registry",
    "reducer": "mpcompat.pickling.registry",
    "explain": "mpcompat.diagnose",
    "assert_picklable": "mpcompat.diagnose",
    "per_process": "mpcompat.pickling.per_process",
    "MpcompatWarning": "mpcompat.errors",
    "PatchUnavailable": "mpcompat.errors",
    "BrokenPool": "mpcompat.errors",
    "WorkerLostError": "mpcompat.errors",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'mpcompat' has no attribute %r" % name)
    value = globals()[name] = getattr(__import__(module, fromlist=[name]), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def status():
    """Return a report of what mpcompat does in this process; ``str()`` of it reads well.

    See :class:`mpcompat.report.Status`.
    """
    from mpcompat.report import Status
    return Status()


from mpcompat.activation import activate, deactivate, is_active  # noqa: E402
from mpcompat import activation as _activation  # noqa: E402

_activation.activate_on_import()
