"""Activation: mpcompat's built-in reducers plus the library patches, switched as one.

``activate()`` registers the dict-view and module reducers and arms the patches;
``deactivate()`` undoes exactly that (copyreg is left as activation found it; reducers that
users registered themselves stay). Both are idempotent and thread-safe.

Activation runs in every interpreter and worker, so the default case (every default patch,
none disabled) defers loading the patch manager: it only watches the target modules, and the
manager is loaded and configured when the first of them is imported, or when status() or
deactivate() needs it.
"""
import os
import sys
from _thread import RLock

_TRUE = ("1", "true", "yes", "on")
_lock = RLock()
_state = {"active": False, "reason": "not activated yet", "conflicts": []}


def env_flag(name, environ=os.environ):
    """Whether the environment variable ``name`` is set to 1, true, yes or on."""
    return environ.get(name, "").strip().lower() in _TRUE


def env_disabled(environ=os.environ):
    """Whether ``MPCOMPAT_DISABLE`` asks for mpcompat to stay off in this process tree."""
    return env_flag("MPCOMPAT_DISABLE", environ)


def builtin_reducers():
    """Return ``{type: reducer}`` for the reducers that activation registers."""
    from mpcompat.rebuild import BUILTIN_REDUCERS
    return dict(BUILTIN_REDUCERS)


def activate(*, patches=None, disabled_patches=None):
    """Register mpcompat's reducers and arm its library patches.

    patches: names of patches to apply (each must be able to apply, else PatchUnavailable);
    None applies every patch that is on by default. disabled_patches: names, or ``"*"``, to
    turn off; None reads ``MPCOMPAT_DISABLED_PATCHES``. Calling it again re-configures.
    """
    if patches is None and disabled_patches is None and _defaults_only():
        with _lock:
            _register_builtins()
            _defer_patches()
        return
    from mpcompat import patch_manager as manager
    requested = None if patches is None else manager.parse_names(patches, "patches")
    if disabled_patches is None:
        disabled = _env_disabled_patches(manager)
        disabled_by = "disabled by MPCOMPAT_DISABLED_PATCHES"
    else:
        disabled = manager.parse_names(disabled_patches, "disabled_patches")
        disabled_by = "disabled by activate(disabled_patches=...)"
    with _lock:
        _register_builtins()
        _undefer_patches()
        manager.configure(requested, disabled, disabled_by)


def _register_builtins():
    """Register the built-in reducers now, or when copyreg is first imported.

    Nothing can pickle or copy before copyreg is imported, and a fresh interpreter has not
    imported it yet: waiting keeps copyreg and the reducers out of start-up.
    """
    _state.update(active=True, reason="activated")
    if "copyreg" in sys.modules:
        _register_builtins_now()
    else:
        from mpcompat import importhook
        importhook.watch("copyreg", _on_copyreg_imported)


def _on_copyreg_imported(module):
    # No activation lock here: this may run inside registry's lock (see registry._table).
    from mpcompat import importhook
    importhook.unwatch("copyreg", _on_copyreg_imported)
    if _state["active"]:
        _register_builtins_now()


def _register_builtins_now():
    from mpcompat import registry
    conflicts = []
    for cls, reducer in builtin_reducers().items():
        try:
            registry.register(cls, reducer)
        except ValueError as exc:
            conflicts.append("%s.%s" % (cls.__module__, cls.__qualname__))
            _warn("left %s.%s alone: %s" % (cls.__module__, cls.__qualname__, exc))
    _state["conflicts"] = conflicts


def _defaults_only():
    """Whether the patch configuration is the default one and the manager is not loaded yet."""
    return ("mpcompat.patch_manager" not in sys.modules
            and not os.environ.get("MPCOMPAT_DISABLED_PATCHES", "").strip())


_deferred = []  # (target module name) watched until the manager is configured


def _defer_patches():
    from mpcompat import importhook, patch_table
    if _deferred:
        return
    targets = {t for spec in patch_table.PATCHES if spec.default for t in spec.targets}
    _deferred.extend(sorted(targets))
    for target in _deferred:
        importhook.watch(target, _configure_deferred)


def _undefer_patches():
    if _deferred:
        from mpcompat import importhook
        for target in _deferred:
            importhook.unwatch(target, _configure_deferred)
        del _deferred[:]


def _configure_deferred(module=None):
    """Load the manager and arm the default patches (a target was imported, or asked for)."""
    with _lock:
        if not _deferred:
            return
        _undefer_patches()
        from mpcompat import patch_manager as manager
        manager.configure(None, set(), "")


def complete_deferred():
    """Do the deferred work now (register reducers, arm patches): status() reports it all."""
    import copyreg  # noqa: F401  (its import hook registers the reducers if still pending)
    if _deferred:
        _configure_deferred()


def _env_disabled_patches(manager):
    """Read MPCOMPAT_DISABLED_PATCHES; a typo there warns instead of turning mpcompat off."""
    names = {n.strip() for n in os.environ.get("MPCOMPAT_DISABLED_PATCHES", "").split(",")}
    names.discard("")
    unknown = sorted(names - set(manager.known_names()) - {"*"})
    if unknown:
        _warn("MPCOMPAT_DISABLED_PATCHES: unknown patch name(s) %s ignored; known: %s"
              % (", ".join(map(repr, unknown)), ", ".join(sorted(manager.known_names()))))
    return manager.parse_names(names.difference(unknown), "MPCOMPAT_DISABLED_PATCHES")


def deactivate():
    """Undo :func:`activate`: revert every patch and remove the built-in reducers."""
    with _lock:
        _undefer_patches()
        from mpcompat import importhook
        importhook.unwatch("copyreg", _on_copyreg_imported)
        from mpcompat import patch_manager as manager
        manager.disarm_all()
        from mpcompat import registry
        for cls, reducer in builtin_reducers().items():
            registry.unregister_if(cls, reducer)
        from mpcompat import rebuild
        rebuild.release_cached_views()
        _state.update(active=False, reason="deactivated by mpcompat.deactivate()", conflicts=[])


def is_active():
    """Whether mpcompat is active in this process."""
    return _state["active"]


def state():
    """Return a copy of the activation state, for status()."""
    return dict(_state)


def activate_on_import():
    """What ``import mpcompat`` does: activate unless MPCOMPAT_DISABLE is set; never raise."""
    if env_disabled():
        _state.update(active=False, reason="disabled by MPCOMPAT_DISABLE=%s"
                      % os.environ.get("MPCOMPAT_DISABLE"))
        return
    try:
        activate()
        _state["reason"] = "activated by import"
    except Exception as exc:
        _state.update(active=False, reason="activation failed: %r" % (exc,))
        _warn("activation failed, mpcompat stays off: %r" % (exc,))


def _warn(message):
    import warnings
    from mpcompat.errors import MpcompatWarning
    warnings.warn(MpcompatWarning("mpcompat: " + message), stacklevel=3)
