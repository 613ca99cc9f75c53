"""The post-import hook: ``watch(name, callback)`` calls back each time a module finishes
executing.

A finder at the front of ``sys.meta_path``, a dict look-up for names nobody watches, chains the
loader the finders behind it give: the callbacks run right after the module's code, once per
execution (import and reload alike), under the module's import lock. A watched submodule done
while its watched top-level package still runs (torch's) is called back when the package is
done: nothing can use it before, and what the patches import costs less then.
"""
import sys

_callbacks = {}   # module name -> list of callables taking the module
_executing = set()  # watched modules whose code is running through the hook
_deferred = {}    # top-level package name -> submodules to call back when it has finished


class _ChainedLoader(object):
    """Runs the real loader, then the callbacks; everything else is the real loader's."""

    def __init__(self, loader):
        self.loader = loader

    @property
    def __class__(self):  # isinstance() checks of callers of find_spec() see the real loader
        return type(self.loader)

    def create_module(self, spec):  # (__getattr__ would fail where the loader has none)
        return getattr(self.loader, "create_module", lambda _: None)(spec)

    def exec_module(self, module):
        """Execute the module with the real loader (its ``__loader__``), then call back."""
        module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        name = module.__name__
        _executing.add(name)
        try:
            self.loader.exec_module(module)
        except BaseException:
            _deferred.pop(name, None)
            raise
        finally:
            _executing.discard(name)
        top = name.partition(".")[0]
        if top != name and top in _executing:
            _deferred.setdefault(top, []).append(module)
            return
        for done in [module] + _deferred.pop(name, []):
            _call_back(done)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _PostImportFinder(object):
    """The meta path finder; a no-op for every name nobody watches."""

    mpcompat_hook = True  # how any copy of this class (another import of it) knows another

    def find_spec(self, fullname, path=None, target=None):
        """The spec the finders behind this one give, its loader chained; None for the rest."""
        if fullname not in _callbacks:
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, "mpcompat_hook", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if getattr(spec.loader, "exec_module", None) is not None:
                    spec.loader = _ChainedLoader(spec.loader)
                return spec
        return None

    def __repr__(self):
        return "<mpcompat post-import hook>"


_finder = _PostImportFinder()


def watch(name, callback):
    """Call ``callback(module)`` each time module ``name`` finishes executing from now on."""
    callbacks = _callbacks.setdefault(name, [])
    if callback not in callbacks:
        callbacks.append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def unwatch(name, callback):
    """Stop calling ``callback`` for module ``name``; remove the finder when nothing is watched."""
    callbacks = _callbacks.get(name, [])
    if callback in callbacks:
        callbacks.remove(callback)
    if not callbacks:
        _callbacks.pop(name, None)
    if not _callbacks:
        while _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def imported(name):
    """Return ``(module, finished)`` for ``name`` (``(None, True)`` when not imported);
    ``finished`` is False while its code still runs."""
    module = sys.modules.get(name)
    if module is None:
        return None, True
    running = name in _executing or getattr(getattr(module, "__spec__", None),
                                            "_initializing", False)
    return module, not running


def _call_back(module):
    for callback in list(_callbacks.get(module.__name__, ())):
        try:
            callback(module)
        except Exception:  # never let a callback break the import of somebody else's module
            pass
