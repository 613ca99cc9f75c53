"""Applies, skips and reverts the declared patches, and keeps their state for status().

Activation hands every patch target to :func:`on_module` once its code has run (see
``mpcompat.patching``), once per execution of that code and under the module's import lock:
that is all the once-only guarantee an application needs. For each armed patch of the module,
the installed version of its library is checked: outside the versions that have the bug the
patch is "not needed" (silently); outside the tested range it stays off with one warning per
process tree; otherwise it applies. Whatever goes wrong, the target's import goes on: a patch
that raises, or whose module cannot be loaded, is "failed", with one warning.

activate() and deactivate() arm and disarm under activation's one lock (bookkeeping only), then
apply to modules imported earlier, or revert, outside it. Patches are idempotent
(``mpcompat.patching.patcher``): a patch disarmed while an import applies it is reverted by
whichever of the two comes last.
"""
import importlib
import os
import sys
from _thread import start_new_thread

from mpcompat import patching as importhook
from mpcompat.patching import versions
from mpcompat.patches import NotNeeded, Skip

(WAITING, APPLIED, NOT_NEEDED, SKIPPED, DISABLED, FAILED, MISSED, INACTIVE) = (
    "waiting for import", "applied", "not needed", "skipped", "disabled", "failed",
    "not applied", "inactive")


class PatchState(object):
    """What happened to one patch in this process."""

    __slots__ = ("spec", "state", "reason", "distribution", "version", "armed", "verdict",
                 "applied", "applications", "newer")

    def __init__(self, spec):
        self.spec = spec
        self.state, self.reason = INACTIVE, "mpcompat is not active"
        self.distribution = None
        self.version = None      # None: not read yet; "": unknown
        self.armed = False
        self.verdict = None      # (state, reason, warning) once the version has been judged
        self.applied = {}        # target name -> the module object it is applied on
        self.applications = 0    # how many times apply() succeeded
        self.newer = ""          # set when Python is newer than the tested range


_states = {}   # name -> PatchState, for the table read at the last arm()
_seen = set()  # target names on_module() was called with


def states(read_versions=True):
    """Return the PatchState of every declared patch, in table order, for status().

    A patch still waiting although its target is imported was bypassed (another finder took
    the import): it is reported as "not applied", with the reason. read_versions: also read
    the version of each patch's library.
    """
    from mpcompat import patches as patch_table
    result = [_states.get(spec.name) or PatchState(spec) for spec in patch_table.PATCHES]
    for st in result:
        if st.state != WAITING:
            continue
        var = st.spec.needs_env
        if var and not os.environ.get(var, "").strip():
            st.state, st.reason = NOT_NEEDED, "%s is not set" % var
        elif st.spec.needed and not st.spec.distributions and _judge(st)[0] == NOT_NEEDED:
            st.state, st.reason = _judge(st)[:2]  # a standard-library patch for a newer Python
        else:
            _check_missed(st)
    for st in result if read_versions else ():
        _read_version(st)
    return result


def _check_missed(st):
    for target in st.spec.targets:
        if target not in sys.modules or target in _seen:
            continue
        ahead = importhook.ahead_of_hook()
        if ahead is None:
            why = "mpcompat's import hook was removed from sys.meta_path"
        elif ahead:
            why = "%s, ahead of mpcompat's import hook on sys.meta_path, imported it" % (
                ", ".join(repr(f) for f in ahead))
        else:
            why = "it was imported without passing through mpcompat's import hook"
        st.state = MISSED
        st.reason = ("%s is imported but the patch never saw it: %s. mpcompat.activate() "
                     "applies it now" % (target, why))
        return


def arm(table, wanted, disabled_by):
    """Arm the patches of ``table`` named in ``wanted`` and disarm the rest (``disabled_by``:
    why they are off, or None for "not requested"). Bookkeeping only, under activation's lock:
    return ``(armed, undo)``, the PatchStates armed and what :func:`revert` must undo."""
    armed, undo = [], []
    for spec in table:
        st = _states.get(spec.name)
        if st is None or st.spec is not spec:
            st = _states[spec.name] = PatchState(spec)
        if spec.name not in wanted:
            undo += _disarm(st, DISABLED, disabled_by or "not requested")
        elif not st.armed:
            st.armed, st.verdict = True, None
            st.state, st.reason = WAITING, "none of %s imported yet" % ", ".join(spec.targets)
        armed += [st] if st.armed else []
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
    """Revert the ``(PatchState, module)`` pairs that :func:`arm` or :func:`disarm_all`
    returned (outside activation's lock: a patch's revert code may import)."""
    for st, module in undo:
        _revert(st, module)


def apply_imported(armed):
    """Apply the ``armed`` PatchStates to their targets imported already (from activate();
    never from inside the import of a target, where applying to other modules could wait for a
    module another thread is importing while that thread waits for this one). A target still
    being imported is waited for in a thread of its own."""
    for st in armed:
        for target in st.spec.targets:
            module, finished = importhook.imported(target)
            if module is not None and not finished:
                start_new_thread(_when_imported, (st, target))
            elif module is not None and st.applied.get(target) is not module:
                _apply(st, module)


def _when_imported(st, name):
    """Apply ``st`` to module ``name`` once the import of it under way has finished (a failed
    import is run again by import_module(): rare, and what any later import would do)."""
    try:
        importlib.import_module(name)
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


def _revert(st, module):
    try:
        _impl(st.spec).revert(module)
    except Exception as exc:
        _warn(st, "could not be reverted on %s: %s: %s" % (module.__name__,
                                                            type(exc).__name__, exc))


def _impl(spec):
    __import__(spec.impl)
    return sys.modules[spec.impl]


def _read_version(st):
    """Read the version of the patch's library (or Python's); return it ("" if unknown)."""
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
    """Return ``(state, reason, warning)``: what the version says (APPLIED: go ahead)."""
    verdict = st.verdict  # (another thread may re-arm, and reset it, meanwhile)
    if verdict is None:
        verdict = st.verdict = _verdict(st)
    return verdict


def _verdict(st):
    version, spec = _read_version(st), st.spec
    if not version:  # unknown (a source build): the patch checks the shapes it relies on
        return APPLIED, "", None
    if spec.needed and not versions.in_range(version, spec.needed):
        return NOT_NEEDED, "%s %s does not have the bug (needed for %s)" % (
            st.distribution, version, spec.needed), None
    if versions.in_range(version, spec.supported):
        return APPLIED, "", None
    if not spec.distributions and versions.newer_than(version, spec.supported):
        # A newer Python: the patch applies where it finds the internals it hooks (its apply()
        # raises Skip where it does not), and status() says it is untested.
        st.newer = "Python %s is newer than the tested %s" % (version, spec.supported)
        return APPLIED, "", None
    reason = "%s %s is outside the tested range %s" % (st.distribution, version, spec.supported)
    return SKIPPED, reason, ("skipped: %s: it stays off. Upgrade mpcompat, or set "
                             "MPCOMPAT_DISABLED_PATCHES=%s to silence this" % (reason, spec.name))


def _apply(st, module):
    """Apply ``st`` to ``module``; never raise."""
    state, reason, warning = _judge(st)
    var = st.spec.needs_env
    if var and not os.environ.get(var, "").strip():
        state, reason, warning = NOT_NEEDED, "%s is not set" % var, None
    elif state == APPLIED:
        st.applied[module.__name__] = module
        state, reason, warning = _try_apply(st, module)
        if state != APPLIED:
            st.applied.pop(module.__name__, None)
        elif not st.armed:  # disarmed meanwhile, by another thread: undo what was just done
            _revert(st, module)
            return
    if state == APPLIED:
        st.applications += 1
        waiting = [t for t in st.spec.targets if t not in st.applied]
        st.state, st.reason = APPLIED, "on %s" % ", ".join(sorted(st.applied)) + (
            "; waiting for %s" % ", ".join(waiting) if waiting else "") + (
            " (%s)" % st.newer if st.newer else "")
    elif not st.applied:  # one target applied and another declining: keep "applied"
        st.state, st.reason = state, reason
    if warning:  # patches failing for one cause (a file of mpcompat they share) warn once
        _warn(st, warning, key=reason if state == FAILED else None)


def _try_apply(st, module):
    """Return ``(state, reason, warning or None)``: what applying ``st`` to ``module`` did."""
    try:
        _impl(st.spec).apply(module)
    except NotNeeded as exc:
        return NOT_NEEDED, str(exc), None
    except Skip as exc:
        return SKIPPED, str(exc), "skipped on %s %s: %s" % (st.distribution, st.version, exc)
    except Exception as exc:
        from mpcompat.errors import describe
        reason = describe(exc)
        if st.spec.impl in sys.modules:
            _revert(st, module)
        return FAILED, reason, "failed on %s %s and was skipped: %s" % (
            st.distribution, st.version, reason)
    return APPLIED, "", None


def require(name):
    """An explicitly requested patch: raise PatchUnavailable if it cannot apply (and leave it
    off, "skipped")."""
    st = _states[name]
    reason = _unavailable(st)
    if reason is not None:
        revert(_disarm(st, SKIPPED, reason))
        from mpcompat.errors import PatchUnavailable  # only when raising: a module less to load
        raise PatchUnavailable("patch %r cannot apply: %s" % (name, reason))


def _unavailable(st):
    if st.state in (SKIPPED, FAILED, NOT_NEEDED, MISSED):
        return st.reason
    state, reason, _ = _judge(st)
    if state != APPLIED:
        return reason
    if st.spec.distributions and not st.version:
        return "%s is not installed (or has no version)" % " / ".join(st.spec.distributions)
    return None


def _warn(st, message, key=None):
    from mpcompat.errors import warn
    warn("patch %r %s" % (st.spec.name, message), key)
