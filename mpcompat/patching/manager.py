"""Applies, skips and reverts the declared patches, and keeps their state for status().

A patch applies to each target handed to :func:`on_module` where its library's version has the
bug (else "not needed") and is tested or newer (an older one is "skipped", quietly); one that
declines in its apply() (``Skip``) is "skipped", and one that raises or cannot load is "failed",
each with one warning. activate() and deactivate() arm and disarm under
activation's lock (bookkeeping only), then apply or revert outside it: a patch disarmed while an
import applies it is reverted by whichever of the two comes last.
"""
import sys
from _thread import start_new_thread

from mpcompat.patching import importhook
from mpcompat.patching import versions
from mpcompat.patching.spec import NotNeeded, Skip

(WAITING, APPLIED, NOT_NEEDED, SKIPPED, DISABLED, FAILED, MISSED, INACTIVE) = (
    "waiting for import", "applied", "not needed", "skipped", "disabled", "failed",
    "not applied", "inactive")


def _module(name):
    """The module ``name``, imported if need be: what ``importlib.import_module`` does for an
    absolute name, without loading ``importlib`` (0.4 ms) in processes that have no other use
    for it."""
    __import__(name)
    return sys.modules[name]


class PatchState(object):
    """What happened to one patch in this process."""

    __slots__ = ("spec", "state", "reason", "distribution", "version", "armed", "verdict",
                 "applied", "applications")

    def __init__(self, spec):
        self.spec, self.state, self.reason = spec, INACTIVE, "mpcompat is not active"
        self.distribution = None
        self.version = None      # None: not read yet; "": unknown
        self.verdict = None      # (state, reason, warning) once the version has been judged
        self.armed, self.applications = False, 0  # applications: how many apply() succeeded
        self.applied = {}        # target name -> the module object it is applied on


_states = {}   # name -> PatchState, for the table read at the last arm()
_seen = set()  # target names on_module() was called with


def states(read_versions=True):
    """The PatchState of every declared patch, in table order (its library's version read,
    unless ``read_versions`` is false)."""
    from mpcompat.patches import table
    result = [_states.get(spec.name) or PatchState(spec) for spec in table.PATCHES]
    for st in result:
        missed = [t for t in st.spec.targets if t in sys.modules and t not in _seen]
        if st.state != WAITING:
            pass
        elif st.spec.env_off():
            st.state, st.reason = NOT_NEEDED, st.spec.env_off()
        elif st.spec.needed and not st.spec.distributions and _judge(st)[0] == NOT_NEEDED:
            st.state, st.reason = _judge(st)  # a standard-library patch for a newer Python
        elif missed:  # another finder took the import
            st.state, st.reason = MISSED, _bypassed(missed[0])
        if read_versions:
            _read_version(st)
    return result


def _bypassed(target):
    path = list(sys.meta_path)
    ahead = path[:path.index(importhook._finder)] if importhook._finder in path else None
    if ahead is None:
        why = "mpcompat's import hook was removed from sys.meta_path"
    elif ahead:
        why = "%s, ahead of mpcompat's import hook on sys.meta_path, imported it" % ", ".join(
            map(repr, ahead))
    else:
        why = "it was imported without passing through mpcompat's import hook"
    return ("%s is imported but the patch never saw it: %s. mpcompat.activate() applies it now"
            % (target, why))


def arm(table, wanted, disabled_by):
    """Arm the patches of ``table`` named in ``wanted``, disarm the rest (``disabled_by``: why,
    or None: "not requested"); return ``(armed PatchStates, what revert() must undo)``."""
    armed, undo = [], []
    for spec in table:
        st = _states.get(spec.name)
        if st is None or st.spec is not spec:
            st = _states[spec.name] = PatchState(spec)
        if spec.name not in wanted:
            undo += _disarm(st, DISABLED, disabled_by or "not requested")
            continue
        if not st.armed:
            st.armed, st.verdict = True, None
            st.state, st.reason = WAITING, "none of %s imported yet" % ", ".join(spec.targets)
        armed.append(st)
    return armed, undo


def disarm_all():
    """Disarm every patch (mpcompat is off); return what :func:`revert` must undo."""
    return [pair for st in _states.values()
            for pair in _disarm(st, INACTIVE, "mpcompat is not active")]


def _disarm(st, state, reason):
    st.armed = False
    st.state, st.reason = state, reason
    applied, st.applied = st.applied, {}
    return [(st, module) for module in applied.values()]


def revert(undo):
    """Revert the ``(PatchState, module)`` pairs that arm() or disarm_all() returned (outside
    activation's lock: a patch's revert code may import)."""
    for st, module in undo:
        try:
            _module(st.spec.impl).revert(module)
        except Exception as exc:
            _warn(st, "could not be reverted on %s: %s: %s" % (module.__name__,
                                                                type(exc).__name__, exc))


def apply_imported(armed):
    """Apply the ``armed`` PatchStates to their targets imported already (a target still being
    imported: in a thread of its own, once it is). Never from inside an import: a deadlock."""
    for st in armed:
        for target in st.spec.targets:
            module, finished = importhook.imported(target)
            if module is not None and not finished:
                start_new_thread(_when_imported, (st, target))
            elif module is not None and st.applied.get(target) is not module:
                _apply(st, module)


def preload(prefix):
    """Import the modules of the armed patches that will apply to a module named ``prefix...``
    not imported yet, and judge their versions: once in a forkserver, inherited by every child
    it forks instead of done in each. Never raises (an import that fails fails again where the
    patch applies, and is reported there)."""
    for st in list(_states.values()):
        try:
            if st.armed and not st.spec.env_off() and any(
                    t.startswith(prefix) and t not in sys.modules for t in st.spec.targets) \
                    and _judge(st)[0] == APPLIED:
                _module(st.spec.impl)
        except Exception:
            pass


def _when_imported(st, name):
    """Apply ``st`` to module ``name`` once the import of it under way has finished."""
    try:
        _module(name)  # a failed import is run again: what any import would do
    except Exception:
        return
    module, finished = importhook.imported(name)
    if st.armed and finished and st.applied.get(name) is not module:
        _apply(st, module)


def on_module(module):
    """A target module finished executing: apply the armed patches that target it."""
    _seen.add(module.__name__)
    for st in list(_states.values()):
        if st.armed and module.__name__ in st.spec.targets:
            _apply(st, module)


def _read_version(st):
    """Read the version of the patch's library (or Python's), once; "" if unknown."""
    if st.version is None:
        if not st.spec.distributions:
            st.distribution, st.version = "Python", versions.python_version()
        else:
            package = st.spec.targets[0].split(".")[0]
            dist, version = versions.version_of(st.spec.distributions, package)
            st.distribution = dist or st.spec.distributions[0]
            st.version = str(version) if version else ""
    return st.version


def _judge(st):
    """Return ``(state, reason)``: what the version says (APPLIED: go ahead)."""
    verdict = st.verdict  # read once: another thread may re-arm, and reset it, meanwhile
    if verdict is None:
        verdict = st.verdict = _verdict(st)
    return verdict


def _verdict(st):
    version, spec = _read_version(st), st.spec
    if version and spec.needed and not versions.in_range(version, spec.needed):
        return NOT_NEEDED, "%s %s does not have the bug (needed for %s)" % (
            st.distribution, version, spec.needed)
    if not version or versions.in_range(version, spec.supported):
        return APPLIED, ""  # unknown (a source build): the patch checks what it relies on
    untested = "untested on %s %s; tested %s" % (st.distribution, version, spec.supported)
    if versions.newer_than(version, spec.supported):
        # A newer release never switches a fix off: the patch applies where it finds what it
        # hooks (else its apply() raises Skip), quietly; status() says it is untested.
        return APPLIED, untested
    return SKIPPED, untested + ": it stays off below the tested versions"


def _apply(st, module):
    """Apply ``st`` to ``module``; never raise."""
    (state, reason), warning = _judge(st), None
    if st.spec.env_off():
        state, reason = NOT_NEEDED, st.spec.env_off()
    elif state == APPLIED:
        st.applied[module.__name__] = module
        try:
            _module(st.spec.impl).apply(module)
        except NotNeeded as exc:
            state, reason = NOT_NEEDED, str(exc)
        except Skip as exc:
            state, reason = SKIPPED, str(exc)
            warning = "skipped on %s %s: %s" % (st.distribution, st.version, exc)
        except Exception as exc:
            from mpcompat.errors import describe_exception
            state, reason = FAILED, describe_exception(exc)
            warning = "failed on %s %s and was skipped: %s" % (st.distribution, st.version,
                                                               reason)
            if st.spec.impl in sys.modules:
                revert([(st, module)])
        if state != APPLIED:
            st.applied.pop(module.__name__, None)
        elif not st.armed:  # disarmed meanwhile, by another thread: undo what was just done
            revert([(st, module)])
            return
    if state == APPLIED:
        st.applications += 1
        waiting = [t for t in st.spec.targets if t not in st.applied]
        st.state, st.reason = APPLIED, "on %s" % ", ".join(sorted(st.applied)) + (
            "; waiting for %s" % ", ".join(waiting) if waiting else "") + (
            " (%s)" % reason if reason else "")
    elif not st.applied:  # one target applied and another declining: keep "applied"
        st.state, st.reason = state, reason
    if warning:  # patches failing for one cause (a file of mpcompat they share) warn once
        _warn(st, warning, key=reason if state == FAILED else None)


def require(name):
    """Raise PatchUnavailable for an explicitly requested patch that cannot apply (left off,
    "skipped")."""
    st = _states[name]
    state, reason = st.state, st.reason
    if state not in (SKIPPED, FAILED, NOT_NEEDED, MISSED):
        state, reason = _judge(st)
        if state == APPLIED and st.spec.distributions and not st.version:
            reason = "%s is not installed (or has no version)" % " / ".join(st.spec.distributions)
        elif state == APPLIED:
            return
    revert(_disarm(st, SKIPPED, reason))
    from mpcompat.errors import PatchUnavailable  # only when raising: a module less to load
    raise PatchUnavailable("patch %r cannot apply: %s" % (name, reason))


def _warn(st, message, key=None):
    from mpcompat.errors import warn
    warn("patch %r %s" % (st.spec.name, message), key)
