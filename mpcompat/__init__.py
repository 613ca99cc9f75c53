"""mpcompat: PyTorch-style multiprocessing that just works under spawn and forkserver.

Importing this package activates it (unless ``MPCOMPAT_DISABLE=1``): dict views and modules
pickle, and known library bugs are patched when those libraries are imported.
"""
from mpcompat.activation import activate, deactivate, is_active

__version__ = "0.1.0"

__all__ = [
    "activate", "deactivate", "is_active", "status",
    "register", "unregister", "registered", "registering", "reducer",
    "explain", "assert_picklable",
    "MpcompatWarning", "PatchUnavailable",
]

# Loaded on first use (PEP 562), so that activation stays cheap.
_LAZY = {
    "register": "mpcompat.registry",
    "unregister": "mpcompat.registry",
    "registered": "mpcompat.registry",
    "registering": "mpcompat.registry",
    "reducer": "mpcompat.registry",
    "status": "mpcompat.report",
    "explain": "mpcompat.diagnose",
    "assert_picklable": "mpcompat.diagnose",
    "MpcompatWarning": "mpcompat.errors",
    "PatchUnavailable": "mpcompat.errors",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'mpcompat' has no attribute %r" % name)
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


from mpcompat import activation as _activation  # noqa: E402

_activation.activate_on_import()
