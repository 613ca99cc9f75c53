"""Activation: mpcompat's built-in reducers plus the library patches, switched as one.

``activate()`` registers the dict-view and module reducers and arms the patches;
``deactivate()`` undoes exactly that (copyreg is left as activation found it; reducers that
users registered themselves stay). Both are idempotent, and serialized by one lock.

Activation runs in every interpreter and worker, so it does almost nothing itself: it watches
``copyreg`` (the reducers are registered when it is imported: nothing can pickle before) and
the target modules of the patch table. The patch manager is loaded when the first target is
imported, or at once when activate() finds targets imported already.

A broken install is the start-up hook's to report (``_mpcompat_bootstrap``): inside the
package, an import error is an error, and a patch that cannot load is "failed" in status().
"""
import os
import sys
from _thread import RLock

_TRUE = ("1", "true", "yes", "on")
_lock = RLock()
_state = {"active": False, "how": "not activated yet", "conflicts": []}
_config = {"table": (), "wanted": frozenset(), "disabled_by": None, "armed": False}
_registered = {}  # the built-in reducers activation registered: {type: reducer}


def env_disabled():
    """Whether ``MPCOMPAT_DISABLE`` asks for mpcompat to stay off in this process tree."""
    return os.environ.get("MPCOMPAT_DISABLE", "").strip().lower() in _TRUE


def builtin_reducers():
    """Return ``{type: reducer}`` for the reducers that activation registers."""
    from mpcompat.pickling import BUILTIN_REDUCERS
    return dict(BUILTIN_REDUCERS)


def _normalize(name):
    """A patch name as compared: lower case, ``-`` read as ``_`` (``torch.Boolean-Dispatch``)."""
    return name.strip().lower().replace("-", "_")


def _parse_names(value, what, known, strict=True):
    """Turn a comma-separated string, ``"*"`` or an iterable into a set of known patch names.

    Unknown names raise ``ValueError`` (``strict``) or are returned as the second item of
    ``(names, unknown)``.
    """
    if isinstance(value, str):
        value = value.split(",")
    by_norm = {_normalize(n): n for n in known}
    names, unknown = set(), []
    for raw in value or ():
        if not isinstance(raw, str):
            raise TypeError("%s: patch names are strings, got %r" % (what, raw))
        if raw.strip() == "*":
            names.update(known)
        elif _normalize(raw) in by_norm:
            names.add(by_norm[_normalize(raw)])
        elif raw.strip():
            unknown.append(raw.strip())
    if unknown and strict:
        raise ValueError("%s: unknown patch name(s) %s; known: %s%s" % (
            what, ", ".join(map(repr, unknown)), ", ".join(sorted(known)),
            _suggestions(unknown, known)))
    return names if strict else (names, unknown)


def _suggestions(unknown, known):
    import difflib
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(_normalize(name), [_normalize(k) for k in known], 1,
                                          0.6)
        if close:
            match = [k for k in known if _normalize(k) == close[0]][0]
            hints.append("did you mean %s (for %r)?" % (match, name) if len(unknown) > 1
                         else "did you mean %s?" % match)
    return " (%s)" % "; ".join(hints) if hints else ""


def activate(*, patches=None, disabled_patches=None):
    """Register mpcompat's reducers and arm its library patches.

    patches: names of patches to apply (each must be able to apply, else PatchUnavailable);
    None applies every patch. disabled_patches: names, or ``"*"``, to turn off; None reads
    ``MPCOMPAT_DISABLED_PATCHES``. Calling it again re-configures.
    """
    _activate(patches, disabled_patches, "activated by mpcompat.activate()")


def _activate(patches, disabled_patches, how):
    from mpcompat import patches as patch_table
    from mpcompat import patching as importhook
    table = patch_table.PATCHES
    known = [spec.name for spec in table]
    requested = set(known) if patches is None else _parse_names(patches, "patches", known)
    if disabled_patches is None:
        raw = os.environ.get("MPCOMPAT_DISABLED_PATCHES", "")
        disabled, unknown = _parse_names(raw, "MPCOMPAT_DISABLED_PATCHES", known, strict=False)
        disabled_by = "disabled by MPCOMPAT_DISABLED_PATCHES"
        if unknown:  # a typo there must not turn all of mpcompat off: say it, keep the rest
            from mpcompat.errors import warn
            warn("MPCOMPAT_DISABLED_PATCHES: unknown patch name(s) %s ignored%s; known: %s"
                 % (", ".join(map(repr, unknown)), _suggestions(unknown, known),
                    ", ".join(known)))
    else:
        disabled = _parse_names(disabled_patches, "disabled_patches", known)
        disabled_by = "disabled by activate(disabled_patches=...)"
    live = {t for spec in table for t in spec.targets
            if not spec.needs_env or os.environ.get(spec.needs_env, "").strip()}
    with _lock:
        _config.update(table=table, wanted=frozenset(requested - disabled),
                       disabled_by=disabled_by if disabled else None, armed=False)
        _state.update(active=True, how=how)
        if "copyreg" in sys.modules:
            _register_builtins()
        else:
            importhook.watch("copyreg", _on_copyreg)
        for target in {t for spec in table for t in spec.targets} - live:
            importhook.unwatch(target, _on_target)
        for target in live:
            importhook.watch(target, _on_target)
        if patches is None and "mpcompat.patching.manager" not in sys.modules \
                and not any(t in sys.modules for t in live):
            return  # the manager loads, and arms the patches, when a target is imported
        from mpcompat.patching import manager
        armed, undo = _arm(manager)
    manager.revert(undo)
    manager.apply_imported(armed)
    for name in sorted(requested - disabled if patches is not None else ()):
        manager.require(name)


def _arm(manager):
    """Arm the patches as configured (caller holds the lock): see manager.arm()."""
    _config["armed"] = True
    return manager.arm(_config["table"], _config["wanted"], _config["disabled_by"])


def ensure_armed():
    """Arm the patches if mpcompat is active and no target was imported yet; return the patch
    manager (for the first target's import, and for status())."""
    from mpcompat.patching import manager
    if not _config["armed"]:
        with _lock:  # bookkeeping only: nothing is imported or applied while it is held
            if not _config["armed"] and _state["active"]:
                _arm(manager)  # nothing is applied yet: nothing to undo
    return manager


def _on_copyreg(module):
    from mpcompat import patching as importhook
    importhook.unwatch("copyreg", _on_copyreg)
    if _state["active"]:
        try:
            _register_builtins()
        except Exception as exc:  # the user's import goes on; the failure is said, not dropped
            _warn_failure("dict views and modules stay unpicklable", exc)


def _register_builtins():
    from mpcompat.pickling import registry
    conflicts = []
    for cls, reducer in builtin_reducers().items():
        try:
            registry.register(cls, reducer)
            _registered[cls] = reducer
        except ValueError as exc:
            conflicts.append("%s.%s" % (cls.__module__, cls.__qualname__))
            from mpcompat.errors import warn
            warn("left %s.%s alone: %s" % (cls.__module__, cls.__qualname__, exc))
    _state["conflicts"] = conflicts


def _on_target(module):
    """The one callback for every patch target: hand the module to the patch manager."""
    if not _state["active"]:
        return
    try:
        ensure_armed().on_module(module)
    except Exception as exc:  # the user's import goes on; the failure is said, not dropped
        _warn_failure("%s is not patched" % module.__name__, exc)


def _warn_failure(what, exc):
    from mpcompat.errors import describe, warn
    cause = describe(exc)
    warn("%s: %s" % (what, cause), key=cause)  # one warning for one cause, whatever it hit


def deactivate():
    """Undo :func:`activate`: revert every patch and remove the built-in reducers."""
    from mpcompat import patching as importhook
    undo = []
    with _lock:
        for spec in _config["table"]:
            for target in spec.targets:
                importhook.unwatch(target, _on_target)
        importhook.unwatch("copyreg", _on_copyreg)
        _state.update(active=False, how="deactivated by mpcompat.deactivate()", conflicts=[])
        _config["armed"] = False
        manager = sys.modules.get("mpcompat.patching.manager")
        if manager is not None:
            undo = manager.disarm_all()
        if _registered:
            from mpcompat.pickling import registry
            for cls, reducer in list(_registered.items()):
                registry.unregister_if(cls, reducer)
            _registered.clear()
    if manager is not None:
        manager.revert(undo)


def is_active():
    """Whether mpcompat is active in this process."""
    return _state["active"]


def state():
    """Return a copy of the activation state, for status()."""
    return dict(_state)


def note_command():
    """The ``mpcompat`` command imported mpcompat itself: say so in status()."""
    if _state["how"] == "activated by import mpcompat":
        _state["how"] = "activated by the mpcompat command itself"


def activate_on_import():
    """What ``import mpcompat`` does: activate unless MPCOMPAT_DISABLE is set."""
    if env_disabled():
        _state["how"] = "off: MPCOMPAT_DISABLE=%s is set" % os.environ["MPCOMPAT_DISABLE"].strip()
        return
    boot = sys.modules.get("_mpcompat_bootstrap")
    calls = getattr(boot, "calls", None)
    if calls and getattr(boot, "outcome", "") is None:  # the start-up hook is importing us
        how = "activated at start-up by %s" % {
            "mpcompat run": "'mpcompat run'"}.get(calls[0], calls[0])
    else:
        how = "activated by import mpcompat"
    _activate(None, None, how)
