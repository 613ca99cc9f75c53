"""A minimal post-import hook: call back when a watched module finishes executing.

A finder at the front of ``sys.meta_path`` answers only for watched names (one dict look-up
for every other import). For a watched name it asks the finders behind it for the real spec
and wraps the loader, so that the callback runs right after the module's code has run, on first
import and on ``importlib.reload`` alike. The module's ``__loader__`` and ``__spec__.loader``
are set back to the real loader before its code runs, so nothing inside sees the wrapper.

A callback that raises never breaks the import: callbacks are expected to catch their own
errors (the patch manager does), and anything that still escapes is dropped here.
"""
import sys
from _thread import get_ident

_callbacks = {}  # module name -> list of callables taking the module


class _ChainedLoader(object):
    """Wraps a loader: runs the module, then the callbacks watching its name."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        notify(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _PostImportFinder(object):
    """The meta path finder; a no-op for every name nobody watches."""

    # (name, thread id) pairs being looked up: guards against asking ourselves again, per
    # thread, so that another thread importing the same name is not turned away meanwhile.
    _busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _callbacks:
            return None
        key = (fullname, get_ident())
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(key)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        if not isinstance(spec.loader, _ChainedLoader):
            spec.loader = _ChainedLoader(spec.loader)
        return spec


_finder = _PostImportFinder()


def _install():
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _uninstall():
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def watch(name, callback):
    """Call ``callback(module)`` each time module ``name`` finishes executing.

    If the module is already imported, the callback runs at once. Watching the same callback
    twice is a no-op.
    """
    callbacks = _callbacks.setdefault(name, [])
    if callback not in callbacks:
        callbacks.append(callback)
    _install()
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)


def unwatch(name, callback):
    """Stop calling ``callback`` for module ``name``; remove the finder when nothing is watched."""
    callbacks = _callbacks.get(name, [])
    if callback in callbacks:
        callbacks.remove(callback)
    if not callbacks:
        _callbacks.pop(name, None)
    if not _callbacks:
        _uninstall()


def notify(module):
    """Run the callbacks watching ``module``'s name (after its code has run)."""
    for callback in list(_callbacks.get(module.__name__, ())):
        _call(callback, module)


def _call(callback, module):
    try:
        callback(module)
    except Exception:  # never let a callback break the import of somebody else's module
        pass
