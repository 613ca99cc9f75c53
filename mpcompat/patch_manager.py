"""Applies, skips and reverts the declared patches, and keeps their state for status().

A patch is armed by activation: its targets are watched, and it applies when each target
finishes importing (at once if already imported). Before the first application the installed
version of its distribution is checked against the declared range. Whatever goes wrong, the
target's import goes on: the patch is marked skipped or failed and one ``MpcompatWarning``
says which patch, which version and why.
"""
import sys
from _thread import RLock

from mpcompat.errors import MpcompatWarning, PatchUnavailable
from mpcompat import importhook, patch_table
from mpcompat.patch_table import Skip

WAITING, APPLIED, SKIPPED, DISABLED, FAILED, INACTIVE = (
    "waiting for import", "applied", "skipped", "disabled", "failed", "inactive")

_lock = RLock()


class PatchState(object):
    """What happened to one patch in this process."""

    __slots__ = ("spec", "state", "distribution", "version", "reason", "applied_to",
                 "callback", "warned")

    def __init__(self, spec):
        self.spec = spec
        self.state = INACTIVE
        self.distribution = None
        self.version = None  # None: not read yet; "": not installed
        self.reason = "mpcompat is not active"
        self.applied_to = []
        self.callback = None
        self.warned = False

    def __repr__(self):
        return "<patch %s: %s%s>" % (self.spec.name, self.state,
                                     " (%s)" % self.reason if self.reason else "")


# name -> PatchState. The table is read at every call (never copied at import), so that a
# PatchSpec added to or changed in patch_table.PATCHES later is seen.
_states = {}


def _state(spec):
    st = _states.get(spec.name)
    if st is None or st.spec is not spec:
        if st is not None:
            _disarm(st)
        st = _states[spec.name] = PatchState(spec)
    return st


def known_names():
    """Return the names of the declared patches, in table order."""
    return [spec.name for spec in patch_table.PATCHES]


def states(read_versions=True):
    """Return the PatchState of every declared patch, in table order.

    read_versions: also read the installed version of each patch's distribution (imports
    importlib.metadata; for status(), never for start-up).
    """
    with _lock:
        result = [_state(spec) for spec in patch_table.PATCHES]
        if read_versions:
            for st in result:
                _read_version(st)
        return result


def parse_names(value, what):
    """Turn a comma-separated string, ``"*"`` or an iterable into a set of patch names."""
    if value is None:
        return set()
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    names = set(value)
    known = known_names()
    if "*" in names:
        return set(known)
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise ValueError("%s: unknown patch name(s) %s; known: %s"
                         % (what, ", ".join(map(repr, unknown)), ", ".join(sorted(known))))
    return names


def configure(requested, disabled, disabled_by):
    """Arm the patches to use and disarm the rest.

    requested: names asked for explicitly (they raise PatchUnavailable if they cannot apply),
    or None for every patch that is on by default. disabled: names turned off;
    disabled_by: what turned them off, for status().
    """
    with _lock:
        specs = patch_table.PATCHES
        wanted = set(requested) if requested is not None else {
            spec.name for spec in specs if spec.default}
        wanted -= set(disabled)
        for name in set(_states) - {spec.name for spec in specs}:  # dropped from the table
            _disarm(_states.pop(name))
        for spec in specs:
            st = _state(spec)
            if spec.name in wanted:
                _arm(st)
            else:
                _disarm(st)
                st.state = DISABLED
                st.reason = (disabled_by if spec.name in disabled
                             else "off by default" if not spec.default else "not requested")
        for spec in specs:
            if spec.name in (requested or ()) and spec.name not in disabled:
                _insist(_states[spec.name])


def disarm_all():
    """Revert every applied patch and stop watching all targets."""
    with _lock:
        for st in _states.values():
            _disarm(st)
            st.state = INACTIVE
            st.reason = "mpcompat is not active"


def _arm(st):
    if st.callback is not None:
        return
    st.state, st.reason = WAITING, "none of %s imported yet" % ", ".join(st.spec.targets)

    def callback(module, st=st):
        _on_target_imported(st, module)
    st.callback = callback
    for target in st.spec.targets:
        importhook.watch(target, callback)


def _disarm(st):
    if st.callback is None:
        return
    for target in st.spec.targets:
        importhook.unwatch(target, st.callback)
    st.callback = None
    if st.applied_to:
        impl = _impl(st.spec)
        for name in st.applied_to:
            module = sys.modules.get(name)
            if module is not None:
                try:
                    impl.revert(module)
                except Exception as exc:
                    _warn(st, "could not be reverted on %s: %r" % (name, exc), force=True)
        st.applied_to = []


def _impl(spec):
    __import__(spec.impl)
    return sys.modules[spec.impl]


def _read_version(st):
    if not st.version and not st.spec.distributions:  # a standard-library target
        st.distribution, st.version = "python", "%d.%d.%d" % sys.version_info[:3]
    # "" (not found) is read again: status() may ask before the target is imported, and a
    # package without metadata is only found through its __version__ once imported.
    if not st.version:
        from mpcompat import versions
        dist, version = versions.installed_version(st.spec.distributions)
        if version is None:  # no metadata (vendored, or run from a source tree): ask the package
            top = sys.modules.get(st.spec.targets[0].split(".")[0])
            version = getattr(top, "__version__", None)
            dist = st.spec.distributions[0] if version else None
        st.distribution, st.version = dist, (str(version) if version else "")
    return st.version


def _check_version(st):
    """Return the reason the installed version rules the patch out, or None."""
    from mpcompat import versions
    version = _read_version(st)
    if not version:
        return "%s is not installed (or has no version)" % " / ".join(st.spec.distributions)
    if not versions.in_range(version, st.spec.supported):
        return "%s %s is outside the supported range %s" % (
            st.distribution, version, st.spec.supported)
    return None


def _on_target_imported(st, module):
    with _lock:
        if st.callback is None:
            return
        reason = _check_version(st)
        if reason is not None:
            st.state, st.reason = SKIPPED, reason
            _warn(st, "skipped: " + reason)
            return
        try:
            impl = _impl(st.spec)
            impl.apply(module)
        except Skip as exc:
            st.state, st.reason = SKIPPED, str(exc)
            _warn(st, "skipped on %s %s: %s" % (st.distribution, st.version, exc))
            return
        except Exception as exc:
            st.state, st.reason = FAILED, "%s: %s" % (type(exc).__name__, exc)
            _warn(st, "failed on %s %s and was skipped: %s" % (st.distribution, st.version,
                                                                st.reason))
            try:
                _impl(st.spec).revert(module)
            except Exception:
                pass
            return
        if module.__name__ not in st.applied_to:
            st.applied_to.append(module.__name__)
        st.state = APPLIED
        waiting = [t for t in st.spec.targets if t not in st.applied_to]
        st.reason = "on %s" % ", ".join(st.applied_to) + (
            "; waiting for %s" % ", ".join(waiting) if waiting else "")


def _insist(st):
    """For an explicitly requested patch: raise PatchUnavailable if it cannot apply."""
    reason = st.reason if st.state in (SKIPPED, FAILED) else _check_version(st)
    if reason is not None:
        _disarm(st)
        st.state, st.reason = SKIPPED, reason
        raise PatchUnavailable("patch %r cannot apply: %s" % (st.spec.name, reason))


def _warn(st, message, force=False):
    if st.warned and not force:
        return
    st.warned = True
    import warnings
    warnings.warn(MpcompatWarning("mpcompat: patch %r %s" % (st.spec.name, message)),
                  stacklevel=3)
