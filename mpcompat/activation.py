"""Activation: mpcompat's built-in reducers plus the library patches, switched as one.

It runs in every process, so it only watches ``copyreg`` and the patch targets: the reducers
register when copyreg is imported, the patch manager loads with the first target.
"""
import os
import sys
from _thread import RLock

def process_lock(locks):
    """This process's lock in ``locks`` (a dict, pid -> RLock), made on first use (an atomic
    ``setdefault``): a forked child never waits for one a thread of its parent held at the fork.
    Each ``Patcher`` and ``ExceptHooks`` uses it too."""
    return locks.get(os.getpid()) or locks.setdefault(os.getpid(), RLock())


_locks = {}  # pid -> activation's lock in that process


_state = {"active": False, "how": "not activated yet", "conflicts": []}
_config = {"watched": frozenset(), "arm": None}  # arm: manager.arm()'s arguments, till called
_registered = {}  # the built-in reducers activation registered: {type: reducer}


def env_disabled():
    """Whether ``MPCOMPAT_DISABLE`` asks for mpcompat to stay off in this process tree."""
    return os.environ.get("MPCOMPAT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def builtin_reducers():
    """Return ``{type: reducer}`` for the reducers that activation registers."""
    from mpcompat.pickling.builtin import BUILTIN_REDUCERS
    return dict(BUILTIN_REDUCERS)


def _parse_names(value, what, known, strict=True):
    """Turn a comma-separated string, ``"*"`` or an iterable into a set of known patch names
    (compared in lower case, ``-`` as ``_``); unknown ones raise ValueError (``strict``), else
    are ignored with a warning."""
    def normalize(name):
        return name.strip().lower().replace("-", "_")
    by_norm = {normalize(n): n for n in known}
    names, unknown = set(), []
    for raw in value.split(",") if isinstance(value, str) else value or ():
        if not isinstance(raw, str):
            raise TypeError("%s: patch names are strings, got %r" % (what, raw))
        norm = normalize(raw)
        if norm == "*":
            names.update(known)
        elif norm in by_norm:
            names.add(by_norm[norm])
        elif norm:
            unknown.append(raw.strip())
    if not unknown:
        return names
    import difflib
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(normalize(name), list(by_norm), 1, 0.6)
        if close:
            hints.append("did you mean %s%s?" % (
                by_norm[close[0]], " (for %r)" % name if len(unknown) > 1 else ""))
    hints = " (%s)" % "; ".join(hints) if hints else ""
    message = "%s: unknown patch name%s %s" % (what, "s" if len(unknown) > 1 else "",
                                               ", ".join(map(repr, unknown)))
    if strict:
        raise ValueError("%s; known: %s%s" % (message, ", ".join(sorted(known)), hints))
    from mpcompat.errors import warn  # a typo in the variable must not turn mpcompat off
    warn("%s ignored%s; `mpcompat status` lists the patches" % (message, hints))
    return names


def activate(*, patches=None, disabled_patches=None):
    """Register mpcompat's reducers and arm its library patches.

    patches: names of patches to apply (each must be able to apply, else PatchUnavailable);
    None applies every patch. disabled_patches: names, or ``"*"``, to turn off; None reads
    ``MPCOMPAT_DISABLED_PATCHES``. Calling it again re-configures.
    """
    _activate(patches, disabled_patches, "activated by mpcompat.activate()")


def _activate(patches, disabled_patches, how):
    from mpcompat.patches import table
    from mpcompat.patching import importhook
    rows = table.PATCHES  # read once: a test may swap in a table of its own
    known = [spec.name for spec in rows]
    requested = set(known) if patches is None else _parse_names(patches, "patches", known)
    if disabled_patches is None:
        disabled = _parse_names(os.environ.get("MPCOMPAT_DISABLED_PATCHES", ""),
                                "MPCOMPAT_DISABLED_PATCHES", known, strict=False)
        disabled_by = "disabled by MPCOMPAT_DISABLED_PATCHES"
    else:
        disabled = _parse_names(disabled_patches, "disabled_patches", known)
        disabled_by = "disabled by activate(disabled_patches=...)"
    live = {t for spec in rows if not spec.env_off() for t in spec.targets}
    with process_lock(_locks):
        _config["arm"] = (rows, frozenset(requested - disabled),
                          disabled_by if disabled else None)
        _state.update(active=True, how=how)
        if "copyreg" in sys.modules:
            _register_builtins()
        else:
            importhook.watch("copyreg", _on_copyreg)
        for target in _config["watched"] - live:
            importhook.unwatch(target, _on_target)
        for target in live:
            importhook.watch(target, _on_target)
        _config["watched"] = live
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
    """Arm the patches as configured (the caller holds the lock): see manager.arm()."""
    args, _config["arm"] = _config["arm"], None
    return manager.arm(*args)


def ensure_armed():
    """Arm the patches if mpcompat is active and not armed yet; return the patch manager."""
    from mpcompat.patching import manager
    if _config["arm"] is not None:
        with process_lock(_locks):  # bookkeeping only: nothing imported or applied under it
            if _config["arm"] is not None:
                _arm(manager)  # nothing is applied yet: nothing to undo
    return manager


def _on_copyreg(module):
    from mpcompat.patching import importhook
    importhook.unwatch("copyreg", _on_copyreg)
    if _state["active"]:
        try:
            _register_builtins()
        except Exception as exc:
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
            warn("left %s alone: %s" % (conflicts[-1], exc))
    _state["conflicts"] = conflicts


def _on_target(module):
    """The one callback for every patch target: hand the module to the patch manager."""
    if _state["active"]:
        try:
            ensure_armed().on_module(module)
        except Exception as exc:
            _warn_failure("%s is not patched" % module.__name__, exc)


def _warn_failure(what, exc):
    """The user's import goes on: the failure is said, once for one cause, not dropped."""
    from mpcompat.errors import describe_exception, warn
    cause = describe_exception(exc)
    warn("%s: %s" % (what, cause), key=cause)


def deactivate():
    """Undo :func:`activate`: revert every patch and remove the built-in reducers."""
    from mpcompat.patching import importhook
    with process_lock(_locks):
        for target in _config["watched"]:
            importhook.unwatch(target, _on_target)
        importhook.unwatch("copyreg", _on_copyreg)
        _state.update(active=False, how="deactivated by mpcompat.deactivate()", conflicts=[])
        _config.update(watched=frozenset(), arm=None)
        manager = sys.modules.get("mpcompat.patching.manager")
        undo = manager.disarm_all() if manager is not None else []
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
        route = {"mpcompat run": "'mpcompat run'"}.get(calls[0], calls[0])
        how = "activated at start-up by " + route
    else:
        how = "activated by import mpcompat"
    _activate(None, None, how)
