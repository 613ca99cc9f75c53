"""mpcompat: PyTorch-style multiprocessing that just works under spawn and forkserver.

Importing this package activates it (unless ``MPCOMPAT_DISABLE=1``): dict views and modules
pickle, and known library bugs are patched when those libraries are imported. Importing it
never raises: a broken install says so in one line on stderr and leaves mpcompat off.
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
    try:
        value = getattr(__import__(module, fromlist=[name]), name)
    except Exception as exc:
        if _activation is not None:
            _activation.broken(exc)
        raise ImportError("mpcompat.%s cannot be loaded (a broken install?): %s: %s"
                          % (name, type(exc).__name__, exc))
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def status():
    """Return a report of what mpcompat does in this process; ``str()`` of it reads well.

    See :class:`mpcompat.report.Status`. It always answers, even when part of mpcompat is
    broken (then it says which part, and why).
    """
    if _activation is not None:
        try:
            from mpcompat.report import Status
            return Status()
        except Exception as exc:
            _activation.broken(exc)
            reason = _activation.state()["broken"] or "%s: %s" % (type(exc).__name__, exc)
    else:
        reason = _BROKEN
    return _BrokenStatus(reason)


class _BrokenStatus(object):
    """status() when mpcompat cannot load its own report: what is broken, and nothing else."""

    def __init__(self, reason):
        self.active, self.broken = False, reason
        self.how = "off: broken install (%s)" % reason
        self.patches, self.reducers = [], {}

    def __str__(self):
        return ("mpcompat %s: inactive in this process, %s\nreinstall mpcompat to fix this"
                % (__version__, self.how))

    def __repr__(self):
        return "<mpcompat.Status active=False broken=%r>" % self.broken


try:
    from mpcompat import activation as _activation
    from mpcompat.activation import activate, deactivate, is_active
    _BROKEN = None
except Exception as _exc:  # a core file is broken: stay off, say so once, never raise
    _activation = None
    _BROKEN = "%s: %s" % (type(_exc).__name__, _exc)
    _tb = _exc.__traceback__
    while _tb.tb_next is not None:  # the innermost frame: the broken file
        _tb = _tb.tb_next
    _file = getattr(_exc, "filename", None) or _tb.tb_frame.f_code.co_filename
    if "mpcompat" in _file:
        _BROKEN = "mpcompat/%s: %s" % (_file.replace("\\", "/").rsplit("mpcompat/", 1)[-1],
                                       _BROKEN)

    def is_active():
        """Whether mpcompat is active in this process (never: it is broken)."""
        return False

    def activate(**kwargs):
        """mpcompat is broken: raise RuntimeError saying why."""
        raise RuntimeError("mpcompat cannot be activated: broken install (%s)" % _BROKEN)

    def deactivate():
        """mpcompat is broken, hence off already: nothing to undo."""

    import os as _os
    import sys as _sys
    if not _os.environ.get("MPCOMPAT_AUTOSTART_FAILED"):
        _os.environ["MPCOMPAT_AUTOSTART_FAILED"] = _BROKEN
        if _sys.stderr is not None:
            _sys.stderr.write("mpcompat: mpcompat is broken, it stays off in this process and "
                              "its children (%s); reinstall it to fix this\n" % _BROKEN)
else:
    _activation.activate_on_import()
