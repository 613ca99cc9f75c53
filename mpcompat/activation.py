"""Activation: mpcompat's built-in reducers plus the library patches, switched as one.

``activate()`` registers the dict-view and module reducers and arms the patches;
``deactivate()`` undoes exactly that (copyreg is left as activation found it; reducers that
users registered themselves stay). Both are idempotent and thread-safe.

Activation runs in every interpreter and worker, so it does almost nothing itself: it watches
``copyreg`` (the reducers are registered when it is imported: nothing can pickle before) and
the target modules of the patch table, through one callback that stays in place for as long as
mpcompat is active. The patch manager is loaded when the first target is imported (or when
``status()`` asks), and decides there which patches apply.

A part of mpcompat that cannot be loaded (a broken install) turns mpcompat off in this process
and its children, with one line on stderr naming the file: see :func:`broken`.
"""
import os
import sys
from _thread import RLock

_TRUE = ("1", "true", "yes", "on")
FAILED_VAR = "MPCOMPAT_AUTOSTART_FAILED"  # set by a process tree's first failure: children skip
_lock = RLock()
_broken_lock = RLock()  # never held while importing: broken() may run inside any import
_state = {"active": False, "how": "not activated yet", "conflicts": [], "broken": None}
# What activate() was asked for: read by the patch manager when it configures itself.
config = {"requested": None, "disabled": frozenset(), "disabled_by": ""}
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_registered = {}  # the built-in reducers activation registered: {type: reducer}


def env_flag(name, environ=os.environ):
    """Whether the environment variable ``name`` is set to 1, true, yes or on."""
    return environ.get(name, "").strip().lower() in _TRUE


def env_disabled(environ=os.environ):
    """Whether ``MPCOMPAT_DISABLE`` asks for mpcompat to stay off in this process tree."""
    return env_flag("MPCOMPAT_DISABLE", environ)


def builtin_reducers():
    """Return ``{type: reducer}`` for the reducers that activation registers."""
    from mpcompat.pickling import BUILTIN_REDUCERS
    return dict(BUILTIN_REDUCERS)


def normalize(name):
    """A patch name as compared: lower case, ``-`` read as ``_`` (``torch.Boolean-Dispatch``)."""
    return name.strip().lower().replace("-", "_")


def parse_names(value, what, known, strict=True):
    """Turn a comma-separated string, ``"*"`` or an iterable into a set of known patch names.

    Names are matched after :func:`normalize`. Unknown names raise ``ValueError`` (``strict``)
    or are returned as the second item of ``(names, unknown)``.
    """
    if value is None:
        value = ()
    if isinstance(value, str):
        value = value.split(",")
    by_norm = {normalize(n): n for n in known}
    names, unknown = set(), []
    for raw in value:
        if not isinstance(raw, str):
            raise TypeError("%s: patch names are strings, got %r" % (what, raw))
        if not raw.strip():
            continue
        if raw.strip() == "*":
            names.update(known)
        elif normalize(raw) in by_norm:
            names.add(by_norm[normalize(raw)])
        else:
            unknown.append(raw.strip())
    if unknown and strict:
        raise ValueError("%s: unknown patch name(s) %s; known: %s%s" % (
            what, ", ".join(map(repr, unknown)), ", ".join(sorted(known)),
            _suggestions(unknown, known)))
    return (names, unknown) if not strict else names


def _suggestions(unknown, known):
    import difflib
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(normalize(name), [normalize(k) for k in known], 1, 0.6)
        if close:
            match = [k for k in known if normalize(k) == close[0]][0]
            hints.append("did you mean %s (for %r)?" % (match, name) if len(unknown) > 1
                         else "did you mean %s?" % match)
    return " (%s)" % "; ".join(hints) if hints else ""


def activate(*, patches=None, disabled_patches=None):
    """Register mpcompat's reducers and arm its library patches.

    patches: names of patches to apply (each must be able to apply, else PatchUnavailable);
    None applies every patch that is on by default. disabled_patches: names, or ``"*"``, to
    turn off; None reads ``MPCOMPAT_DISABLED_PATCHES``. Calling it again re-configures.
    """
    _activate(patches, disabled_patches, "activated by mpcompat.activate()")


def _activate(patches, disabled_patches, how):
    from mpcompat import patches as patch_table
    known = [spec.name for spec in patch_table.PATCHES]
    requested = None if patches is None else parse_names(patches, "patches", known)
    if disabled_patches is None:
        raw = os.environ.get("MPCOMPAT_DISABLED_PATCHES", "")
        disabled, unknown = parse_names(raw, "MPCOMPAT_DISABLED_PATCHES", known, strict=False)
        disabled_by = "disabled by MPCOMPAT_DISABLED_PATCHES"
        if unknown:  # a typo there must not turn all of mpcompat off: say it, keep the rest
            warn("MPCOMPAT_DISABLED_PATCHES: unknown patch name(s) %s ignored%s; known: %s"
                 % (", ".join(map(repr, unknown)), _suggestions(unknown, known),
                    ", ".join(known)))
    else:
        disabled = parse_names(disabled_patches, "disabled_patches", known)
        disabled_by = "disabled by activate(disabled_patches=...)"
    with _lock:
        if _state["broken"]:
            raise RuntimeError("mpcompat cannot be activated: %s" % _state["broken"])
        config.update(requested=requested, disabled=frozenset(disabled), disabled_by=disabled_by)
        _state.update(active=True, how=how)
        from mpcompat import patching as importhook
        importhook.own_failure = _broken_if_own
        _register_builtins()
        live = patch_table.live_targets(os.environ)
        for target in patch_table.all_targets():  # (re-activation may find the set changed)
            if target not in live:
                importhook.unwatch(target, _on_target)
        for target in live:
            importhook.watch(target, _on_target)
        if "mpcompat.patching.manager" not in sys.modules and requested is None:
            return  # loaded, and configured, when a target is imported
    manager = load("mpcompat.patching.manager")
    if manager is not None:
        manager.configure(config)


def _register_builtins():
    """Register the built-in reducers now, or when copyreg is first imported."""
    if "copyreg" in sys.modules:
        _register_builtins_now()
    else:
        from mpcompat import patching as importhook
        importhook.watch("copyreg", _on_copyreg_imported)


def _on_copyreg_imported(module):
    from mpcompat import patching as importhook
    importhook.unwatch("copyreg", _on_copyreg_imported)
    if _state["active"]:
        _register_builtins_now()


def _register_builtins_now():
    try:
        from mpcompat.pickling import registry
        reducers = builtin_reducers()
    except Exception as exc:
        broken(exc)
        return
    conflicts = []
    for cls, reducer in reducers.items():
        try:
            registry.register(cls, reducer)
            _registered[cls] = reducer
        except ValueError as exc:
            conflicts.append("%s.%s" % (cls.__module__, cls.__qualname__))
            warn("left %s.%s alone: %s" % (cls.__module__, cls.__qualname__, exc))
    _state["conflicts"] = conflicts


def _on_target(module):
    """The one callback for every patch target: hand the module to the patch manager."""
    if not _state["active"]:
        return
    manager = load("mpcompat.patching.manager")
    if manager is not None:
        manager.on_module(module, config)


def load(name):
    """Import the mpcompat module ``name``; on failure mark the install broken, return None."""
    try:  # a real import even when sys.modules has it: another thread may still be loading it
        __import__(name)
        return sys.modules[name]
    except Exception as exc:
        broken(exc)
        return None


def deactivate():
    """Undo :func:`activate`: revert every patch and remove the built-in reducers."""
    with _lock:
        _switch_off()
        if not _state["broken"]:
            _state.update(active=False, how="deactivated by mpcompat.deactivate()")


def _switch_off():
    from mpcompat import patching as importhook
    from mpcompat import patches as patch_table
    for target in patch_table.all_targets():
        importhook.unwatch(target, _on_target)
    importhook.unwatch("copyreg", _on_copyreg_imported)
    _state["active"] = False
    if "mpcompat.patching.manager" in sys.modules:
        manager = load("mpcompat.patching.manager")
        if manager is not None:
            manager.disarm_all()
    registry = load("mpcompat.pickling.registry") if _registered else None
    if registry is not None:
        for cls, reducer in list(_registered.items()):  # what we registered, however reloaded
            registry.unregister_if(cls, reducer)
        _registered.clear()
    _state["conflicts"] = []


def broken(exc):
    """A part of mpcompat could not be loaded: turn mpcompat off, say so once, never raise.

    One line on stderr names the file and the error, once per process tree
    (``MPCOMPAT_AUTOSTART_FAILED`` is set for the children, which then start without it).
    """
    try:
        with _broken_lock:
            if _state["broken"]:
                return
            reason = describe_failure(exc)
            _state.update(broken=reason, how="off: broken install (%s)" % reason)
            try:
                _switch_off()
            except Exception:
                pass
            _state["active"] = False
        say_failure("mpcompat is broken", reason)
    except Exception:
        pass


def own_file(exc):
    """The file of mpcompat where ``exc`` comes from (a broken or missing part), or None."""
    if isinstance(exc, SyntaxError):
        name = os.path.abspath(exc.filename or "")
        return name if name.startswith(PACKAGE_DIR + os.sep) else None
    if isinstance(exc, ImportError) and exc.name is not None:  # missing: ours, or a dependency
        if exc.name.startswith("mpcompat."):
            return os.path.join(PACKAGE_DIR, *exc.name.split(".")[1:]) + ".py"
        return None
    innermost, tb = None, exc.__traceback__
    while tb is not None:
        innermost = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    name = os.path.abspath(innermost or "")
    return name if name.startswith(PACKAGE_DIR + os.sep) else None


def _broken_if_own(exc):
    """An mpcompat module failed to load: broken, unless a dependency is what is missing."""
    if own_file(exc) is not None:
        broken(exc)


def describe_failure(exc):
    """``"mpcompat/pickling/registry.py: SyntaxError: invalid syntax (registry.py, line 3)"``."""
    where = own_file(exc)
    text = "%s: %s" % (type(exc).__name__, exc)
    for char in "\r\n\0":
        text = text.replace(char, " ")
    if where:
        where = "mpcompat" + where[len(PACKAGE_DIR):]
    return ("%s: %s" % (where, text) if where else text)[:400]


def say_failure(what, reason):
    """Write the one line about a failure to stderr, unless an ancestor already did."""
    if os.environ.get(FAILED_VAR):
        return
    os.environ[FAILED_VAR] = reason
    stream = sys.stderr
    if stream is not None:
        try:
            stream.write("mpcompat: %s, it stays off in this process and its children (%s); "
                         "reinstall it to fix this\n" % (what, reason))
            stream.flush()
        except Exception:
            pass


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
    """What ``import mpcompat`` does: activate unless MPCOMPAT_DISABLE is set; never raise."""
    if env_disabled():
        _state.update(active=False, how="off: MPCOMPAT_DISABLE=%s is set"
                      % os.environ.get("MPCOMPAT_DISABLE").strip())
        return
    boot = sys.modules.get("_mpcompat_bootstrap")
    calls = getattr(boot, "calls", None)
    if calls and getattr(boot, "outcome", "") is None:  # the start-up hook is importing us
        how = "activated at start-up by %s" % {
            "mpcompat run": "'mpcompat run'"}.get(calls[0], calls[0])
    else:
        how = "activated by import mpcompat"
    try:
        _activate(None, None, how)
    except Exception as exc:
        broken(exc)


def warn(message, key=None):
    """One ``MpcompatWarning``, once per process tree (see mpcompat.errors.warn_once; ``key``
    decides what counts as the same warning, default the message).

    A warning is never a broken install: it never raises, never turns mpcompat off, and is
    never reported as "broken". When a warnings filter makes it an error (``python -W error``,
    ``PYTHONWARNINGS=error``), or a ``warnings.showwarning`` hook raises, the warning is
    written to stderr instead, as ``MpcompatWarning: mpcompat: <message>`` (still
    once per process tree), and mpcompat carries on.
    """
    errors = load("mpcompat.errors")
    if errors is None:
        return
    try:
        errors.warn_once(message, key)
    except Exception as exc:
        line = ("%s: %s" % (type(exc).__name__, exc) if isinstance(exc, Warning)
                else "MpcompatWarning: mpcompat: %s" % message)
        try:
            if sys.stderr is not None:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # no usable stderr: the warning is lost, mpcompat stays on
            pass
