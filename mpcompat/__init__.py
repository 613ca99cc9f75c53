"""mpcompat: PyTorch-style multiprocessing that just works under spawn and forkserver.

Importing this package activates it (unless ``MPCOMPAT_DISABLE=1``): dict views and modules
pickle, and known library bugs are patched when those libraries are imported.
"""
from mpcompat.activation import activate, deactivate, is_active
from mpcompat.registry import reducer, register, registered, registering, unregister

__version__ = "0.1.0"

__all__ = [
    "activate", "deactivate", "is_active", "status",
    "register", "unregister", "registered", "registering", "reducer",
    "explain", "assert_picklable",
    "MpcompatWarning", "PatchUnavailable",
]

# Loaded on first use (PEP 562), so that activation stays cheap.
_LAZY = {
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
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


from mpcompat import activation as _activation  # noqa: E402

_activation.activate_on_import()
