"""The patch machinery: this package is the post-import hook (``watch``); ``manager`` applies
the patches, ``patcher`` is the one way a patch changes anything, ``versions`` reads and
compares versions.

A minimal post-import hook: call back when a watched module has finished executing.

A finder at the front of ``sys.meta_path`` answers only for watched names (one dict look-up
for every other import). For a watched name it asks the finders behind it for the real spec
and hooks that spec's own loader object, so that the callbacks run right after the module's
code has run, on first import and on ``importlib.reload`` alike. Callers of
``importlib.util.find_spec`` see the real loader: the hook is an ``exec_module`` attribute set
on that loader instance (loaders that cannot take one, such as class-level loaders, get a
stand-in that passes ``isinstance`` checks as the real loader's class).

Guarantees, whatever the threads do:
- a callback never sees a module whose code is still running: ``watch()`` on a module that is
  being imported (by this thread or another) calls back once that import has finished;
- each callback runs once per execution of the module's code;
- a callback that raises never breaks the import: anything that escapes is dropped here (the
  patch manager catches its own errors).

No lock of this module is held while a callback runs or while a module imports, so callbacks
may import freely.

mpcompat's own modules, most of them loaded lazily and often inside code that must not raise,
pass through the same hook: one that fails to load (a broken install) is reported through
``own_failure`` wherever the import happened.
"""
import sys
from _thread import RLock, get_ident, start_new_thread

_lock = RLock()
_callbacks = {}   # module name -> list of callables taking the module
_running = {}     # module name -> executions of its code in progress through the hook
_executed = {}    # module name -> the module object whose hooked execution last finished
_called = set()   # module names some callback was called for (see seen())
_waiting = set()  # module names a helper thread waits on (imported before the hook saw them)
_once = {}        # module name -> one-shot callbacks waiting for the import under way
_generation = {}  # module name -> how many times its code ran through the hook
_HOOKED = "_mpcompat_hooked"
_OWN = "mpcompat."
own_failure = None  # called with the exception when one of mpcompat's modules fails to load


def _hook_loader(spec):
    """Make ``spec.loader`` run ``notify`` after the module's code; the loader stays itself."""
    loader = spec.loader
    if getattr(loader, _HOOKED, False):
        return
    if not isinstance(loader, type):
        try:
            original = loader.exec_module

            def exec_module(module, _original=original):
                _execute(_original, module)
            setattr(exec_module, _HOOKED, True)
            loader.exec_module = exec_module  # an instance attribute: this loader only
            setattr(loader, _HOOKED, True)
            return
        except (AttributeError, TypeError):  # no instance dict (__slots__, a C type)
            pass
    spec.loader = _StandIn(loader)


class _StandIn(object):
    """Wraps a loader that cannot take an attribute; ``isinstance`` sees the real one's class."""

    def __init__(self, loader):
        object.__setattr__(self, "loader", loader)

    @property
    def __class__(self):
        return type(self.loader) if not isinstance(self.loader, type) else type

    def create_module(self, spec):
        """The real loader's module creation."""
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        """Run the module with the real loader (which it then sees as its loader), then notify."""
        module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        _execute(self.loader.exec_module, module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def _execute(exec_module, module):
    name = getattr(module, "__name__", None)
    with _lock:
        _running[name] = _running.get(name, 0) + 1
        _generation[name] = _generation.get(name, 0) + 1
    finished = False
    try:
        exec_module(module)
        finished = True
    except BaseException as exc:
        if isinstance(name, str) and name.startswith(_OWN) and own_failure is not None:
            try:
                own_failure(exc)
            except Exception:
                pass
        raise
    finally:
        if finished:
            notify(module)
        else:
            with _lock:
                _leave(name)


def _leave(name):
    count = _running.get(name, 0) - 1
    if count > 0:
        _running[name] = count
    else:
        _running.pop(name, None)


class _PostImportFinder(object):
    """The meta path finder; a no-op for every name nobody watches."""

    # (name, thread id) pairs being looked up: guards against asking ourselves again, per
    # thread, so that another thread importing the same name is not turned away meanwhile.
    _busy = set()

    def find_spec(self, fullname, path=None, target=None):
        """The spec the finders behind this one give, its loader hooked; None for the rest."""
        if fullname not in _callbacks and not fullname.startswith(_OWN):
            return None
        key = (fullname, get_ident())
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(key)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            _hook_loader(spec)
        return spec

    def __repr__(self):
        return "<mpcompat post-import hook>"


_finder = _PostImportFinder()


def _install():
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _uninstall():
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def _complete(name, module):
    """Whether ``module``'s code has finished running (caller holds the lock)."""
    if _running.get(name):
        return False
    if _executed.get(name) is module:
        return True
    spec = getattr(module, "__spec__", None)
    return not getattr(spec, "_initializing", False)


def watch(name, callback):
    """Call ``callback(module)`` each time module ``name`` finishes executing.

    If the module is already imported, the callback runs at once; if it is being imported, as
    soon as that import finishes. Watching the same callback twice is a no-op.
    """
    with _lock:
        callbacks = _callbacks.setdefault(name, [])
        if callback in callbacks:
            return
        callbacks.append(callback)
        _install()
        module = _ready(name, None)
    if module is not None:
        _call(callback, module, name)


def call_if_imported(name, callback):
    """Call ``callback(module)`` once if module ``name`` is imported: at once, or as soon as an
    import of it that is under way finishes. Nothing happens if it is not imported.

    A callback that also watches ``name`` may be called twice for one execution of the module
    (once for each reason): make it idempotent, e.g. keyed by :func:`execution`.
    """
    with _lock:
        module = _ready(name, callback)
    if module is not None:
        _call(callback, module, name)


def _ready(name, once):
    """The module to call back with now, or None (caller holds the lock).

    ``once``: a one-shot callback to keep for when an import under way finishes. A module
    imported without the hook and still executing is waited for by a helper thread.
    """
    module = sys.modules.get(name)
    if module is None:
        return None
    if _running.get(name):
        if once is not None:
            _once.setdefault(name, []).append(once)
        return None
    if _complete(name, module):
        return module
    if once is not None:
        _once.setdefault(name, []).append(once)
    if name not in _waiting:
        _waiting.add(name)
        start_new_thread(_wait_for_import, (name,))
    return None


def _wait_for_import(name):
    """Helper thread: wait until an import of ``name`` that the hook did not see has finished,
    then call back (the import system holds its per-module lock until then)."""
    try:
        import _frozen_importlib
        _frozen_importlib._lock_unlock_module(name)
    except Exception:
        pass
    with _lock:
        _waiting.discard(name)
        module = sys.modules.get(name)
        if module is None:  # the import failed
            _once.pop(name, None)
            return
        if not _complete(name, module):  # a lock we could not wait on: look again
            _waiting.add(name)
            start_new_thread(_wait_for_import, (name,))
            return
        callbacks = list(_callbacks.get(name, ())) + _once.pop(name, [])
    for callback in callbacks:
        _call(callback, module, name)


def unwatch(name, callback):
    """Stop calling ``callback`` for module ``name``; remove the finder when nothing is watched."""
    with _lock:
        callbacks = _callbacks.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _callbacks.pop(name, None)
        if not _callbacks:
            _uninstall()


def watched():
    """Return the names of the watched modules."""
    with _lock:
        return sorted(_callbacks)


def notify(module):
    """Run the callbacks watching ``module``'s name (after its code has run), each once.

    Callbacks added meanwhile (by a callback, or by another thread) are run too.
    """
    name = module.__name__
    done = []
    while True:
        with _lock:
            pending = [cb for cb in _callbacks.get(name, ()) if cb not in done]
            pending += _once.pop(name, [])
            if not pending:
                _executed[name] = module
                _leave(name)
                return
        for callback in pending:
            done.append(callback)
            _call(callback, module, name)


def running(name):
    """Whether module ``name``'s code is running through the hook right now (in any thread)."""
    return bool(_running.get(name))


def seen(name):
    """Whether a callback has been called for module ``name`` in this process."""
    return name in _called


def execution(module):
    """A key that identifies the latest execution of ``module``'s code (a reload is a new one)."""
    return (id(module), _generation.get(module.__name__, 0))


def ahead_of_hook():
    """The finders in front of mpcompat's on ``sys.meta_path`` (None: the hook is not there)."""
    path = list(sys.meta_path)
    if _finder not in path:
        return None
    return path[:path.index(_finder)]


def _call(callback, module, name):
    _called.add(name)
    try:
        callback(module)
    except Exception:  # never let a callback break the import of somebody else's module
        pass
