"""Applies, skips and reverts the declared patches, and keeps their state for status().

Activation hands every patch target to :func:`on_module` once its code has run (see
``mpcompat.patching``). For each patch of that module, armed by the configuration, the
installed version of its library is checked: outside the versions that have the bug the patch
is "not needed" (silently); outside the tested range it stays off with one warning per process
tree; otherwise it applies. Whatever goes wrong, the target's import goes on: a patch that
raises is "failed", with one warning.

Concurrency: each (patch, execution of a target module's code) is applied at most once, and
no lock is held while anything is imported or a patch's code runs, so threads that import
targets at once cannot deadlock on mpcompat.
"""
import os
import sys
from _thread import RLock

from mpcompat import activation
from mpcompat import patching as importhook
from mpcompat import patches as patch_table
from mpcompat.patching import versions
from mpcompat.patches import NotNeeded, Skip

(WAITING, APPLIED, NOT_NEEDED, SKIPPED, DISABLED, FAILED, MISSED, INACTIVE) = (
    "waiting for import", "applied", "not needed", "skipped", "disabled", "failed",
    "not applied", "inactive")

_lock = RLock()
_configured = [None]  # the configuration in force (a copy of activation.config), or None


class PatchState(object):
    """What happened to one patch in this process."""

    __slots__ = ("spec", "state", "distribution", "version", "reason", "applied", "armed", "newer",
                 "generation", "inflight", "verdict", "applications")

    def __init__(self, spec):
        self.spec = spec
        self.state = INACTIVE
        self.distribution = None
        self.version = None      # None: not read yet; "": unknown
        self.reason = "mpcompat is not active"
        self.applied = {}        # target name -> (module, importhook.execution key)
        self.armed = False
        self.generation = 0      # bumped when disarmed: an application under way is undone
        self.inflight = set()    # execution keys being applied right now
        self.verdict = None      # (state, reason) once the version has been judged
        self.applications = 0    # how many times apply() succeeded (once per target execution)
        self.newer = ""          # set when Python is newer than the tested range

    @property
    def applied_to(self):
        """The names of the target modules the patch is applied on."""
        return sorted(self.applied)

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
            _revert_all(_disarm(st))
        st = _states[spec.name] = PatchState(spec)
    return st


def known_names():
    """Return the names of the declared patches, in table order."""
    return [spec.name for spec in patch_table.PATCHES]


def states(read_versions=True):
    """Return the PatchState of every declared patch, in table order, for status().

    Configures the patches first if no target was imported yet. A patch still waiting although
    its target is imported was bypassed (another finder took the import): it is reported as
    "not applied", with the reason, and not applied here. read_versions: also read the
    version of each patch's library (for status(), never for start-up).
    """
    if activation.is_active():
        ensure_configured(activation.config)
    with _lock:
        result = [_state(spec) for spec in patch_table.PATCHES]
        for st in result:
            var = st.spec.needs_env
            if st.state == WAITING and var and not os.environ.get(var, "").strip():
                st.state, st.reason = NOT_NEEDED, "%s is not set" % var  # its targets unwatched
            elif st.state == WAITING:
                # A standard-library patch for what this Python does not have: not needed.
                verdict = _judge_version(st) if st.spec.needed and not st.spec.distributions \
                    else None
                if verdict is not None and verdict[0] == NOT_NEEDED:
                    st.state, st.reason = verdict
                else:
                    _check_missed(st)
    if read_versions:
        for st in result:
            if st.version is None:
                _read_version(st)
    return result


def _check_missed(st):
    for target in st.spec.targets:
        module = sys.modules.get(target)
        if module is None or target in st.applied or importhook.seen(target):
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


def parse_names(value, what):
    """Turn a comma-separated string, ``"*"`` or an iterable into a set of patch names."""
    return activation.parse_names(value, what, known_names())


def ensure_configured(config):
    """Configure from ``config`` unless a configuration is in force already.

    Applies nothing to other modules: it runs inside the import of a target (whose own patches
    ``on_module`` applies next) or for status(). Applying to other modules there could wait for
    a module another thread is importing while that thread waits for this one.
    """
    if _configured[0] is None:
        with _lock:  # another thread may be configuring: wait for it, then look again
            if _configured[0] is None:
                configure(config, apply_now=False)


def configure(config, apply_now=True):
    """Arm the patches ``config`` asks for and disarm the rest.

    config: ``requested`` (names asked for explicitly, which raise PatchUnavailable if they
    cannot apply, or None for every patch), ``disabled`` (names turned off),
    ``disabled_by`` (what turned them off, for status()). With ``apply_now``, the armed
    patches apply at once to targets already imported (an explicit activate() call); without,
    each target's own import hook call applies them. (Already applied is a no-op: every
    application is keyed by the execution of its target's code.)
    """
    requested, disabled = config["requested"], set(config["disabled"])
    undo = []
    with _lock:
        specs = patch_table.PATCHES
        wanted = set(requested) if requested is not None else {spec.name for spec in specs}
        wanted -= disabled
        for name in set(_states) - {spec.name for spec in specs}:  # dropped from the table
            undo.append(_disarm(_states.pop(name)))
        for spec in specs:
            st = _state(spec)
            if spec.name in wanted:
                if not st.armed:
                    st.armed = True
                    st.state, st.reason = WAITING, "none of %s imported yet" % ", ".join(
                        spec.targets)
            else:
                undo.append(_disarm(st))
                st.state = DISABLED
                st.reason = (config["disabled_by"] if spec.name in disabled
                             else "not requested")
        _configured[0] = dict(config)  # last: on_module trusts the states once this is set
    _revert_all(undo)
    for st in [_states[spec.name] for spec in specs if spec.name in wanted] if apply_now else ():
        for target in st.spec.targets:
            importhook.call_if_imported(target, lambda module, st=st: _apply(st, module))
    for name in sorted(requested or ()):
        if name not in disabled:
            _insist(_states[name])


def on_module(module, config, deferred=False):
    """A target module finished executing: apply the armed patches that target it.

    A submodule imported while its top-level package is still importing (torch's submodules,
    during ``import torch``) is patched when that package has finished: nothing can use it
    before, and what the patches need (wrapt, and what wrapt imports) costs a fraction then,
    because the package has imported most of it already.
    """
    name = module.__name__
    top = name.split(".")[0]
    if top != name and not deferred and importhook.running(top):
        importhook.call_if_imported(top, lambda _top, module=module: on_module(
            module, config, deferred=True))
        return
    ensure_configured(config)
    for spec in patch_table.PATCHES:
        if name in spec.targets:
            st = _states.get(spec.name)
            if st is not None and st.armed:
                _apply(st, module)


def disarm_all():
    """Revert every applied patch; forget the configuration (activation makes a new one)."""
    with _lock:
        undo = [_disarm(st) for st in _states.values()]
        for st in _states.values():
            st.state, st.reason = INACTIVE, "mpcompat is not active"
        _configured[0] = None
    _revert_all(undo)


def _disarm(st):
    """Mark ``st`` off (caller holds the lock); return what must be reverted, outside it."""
    st.armed = False
    st.generation += 1
    st.verdict = None  # judged again when armed again (the declared ranges may have changed)
    applied, st.applied = st.applied, {}
    return st, list(applied.values())


def _revert_all(undo):
    for st, applied in undo:
        for module, _ in applied:
            _revert(st, module)


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
    if st.version:
        return st.version
    if not st.spec.distributions:
        st.distribution, st.version = "Python", versions.python_version()
        return st.version
    package = st.spec.targets[0].split(".")[0]
    dist, version = versions.version_of(st.spec.distributions, package)
    st.distribution = dist or st.spec.distributions[0]
    st.version = str(version) if version else ""
    return st.version


def _judge_version(st):
    """Return ``(state, reason)`` when the version rules the patch out, else None."""
    version = _read_version(st)
    if not version:
        return None  # unknown (a source build): the patch checks the shapes it relies on
    spec = st.spec
    if spec.needed and not versions.in_range(version, spec.needed):
        return NOT_NEEDED, "%s %s does not have the bug (needed for %s)" % (
            st.distribution, version, spec.needed)
    if not versions.in_range(version, spec.supported):
        if not spec.distributions and versions.newer_than(version, spec.supported):
            # A newer Python: the patch applies where it finds the internals it hooks (its
            # apply() raises Skip where it does not), and status() says it is untested.
            st.newer = "Python %s is newer than the tested %s" % (version, spec.supported)
            return None
        return SKIPPED, "%s %s is outside the tested range %s" % (
            st.distribution, version, spec.supported)
    return None


def _apply(st, module):
    """Apply ``st`` to ``module`` once per execution of its code; never raise."""
    name = module.__name__
    key = importhook.execution(module)
    with _lock:
        done = st.applied.get(name)
        if not st.armed or (done is not None and done[1] == key) or key in st.inflight:
            return
        st.inflight.add(key)
        generation = st.generation
    try:
        outcome = _try_apply(st, module)
    finally:
        with _lock:
            st.inflight.discard(key)
            current = st.armed and st.generation == generation
            if current:
                _record(st, module, key, outcome)
    if not current and outcome[0] == APPLIED:  # disarmed meanwhile: undo what was just done
        _revert(st, module)
    elif current and outcome[2]:
        _warn(st, outcome[2])


def _try_apply(st, module):
    """Return ``(state, reason, warning or None)``: what applying ``st`` to ``module`` did."""
    if st.verdict is None:
        st.verdict = _judge_version(st) or (APPLIED, "")
    var = st.spec.needs_env
    if var and not os.environ.get(var, "").strip():
        return NOT_NEEDED, "%s is not set" % var, None
    if st.verdict[0] != APPLIED:
        state, reason = st.verdict
        return state, reason, (
            "skipped: %s: it stays off. Upgrade mpcompat, or set MPCOMPAT_DISABLED_PATCHES=%s "
            "to silence this" % (reason, st.spec.name) if state == SKIPPED else None)
    try:
        impl = _impl(st.spec)
        impl.apply(module)
    except NotNeeded as exc:
        return NOT_NEEDED, str(exc), None
    except Skip as exc:
        return SKIPPED, str(exc), "skipped on %s %s: %s" % (st.distribution, st.version, exc)
    except Exception as exc:
        if _is_own_failure(exc) and not sys.modules.get(st.spec.impl):  # a broken mpcompat file
            activation.broken(exc)
            return FAILED, "cannot be loaded: %s" % activation.describe_failure(exc), None
        reason = "%s: %s" % (type(exc).__name__, exc)
        try:
            _impl(st.spec).revert(module)
        except Exception:
            pass
        return FAILED, reason, "failed on %s %s and was skipped: %s" % (
            st.distribution, st.version, reason)
    return APPLIED, "", None


def _is_own_failure(exc):
    """Whether an import failed inside mpcompat's own files (a broken install)."""
    return activation.own_file(exc) is not None


def _record(st, module, key, outcome):
    state, reason = outcome[0], outcome[1]
    name = module.__name__
    if state == APPLIED:
        st.applied[name] = (module, key)
        st.applications += 1
        waiting = [t for t in st.spec.targets if t not in st.applied]
        st.state = APPLIED
        st.reason = "on %s" % ", ".join(st.applied_to) + (
            "; waiting for %s" % ", ".join(waiting) if waiting else "") + (
            " (%s)" % st.newer if st.newer else "")
    elif not st.applied:  # one target applied and another declining: keep "applied"
        st.state, st.reason = state, reason


def _insist(st):
    """For an explicitly requested patch: raise PatchUnavailable if it cannot apply."""
    if st.state in (SKIPPED, FAILED, NOT_NEEDED, MISSED):
        reason = st.reason
    else:
        verdict = _judge_version(st)
        reason = verdict[1] if verdict else None
        if reason is None and st.spec.distributions and not st.version:
            reason = "%s is not installed (or has no version)" % " / ".join(
                st.spec.distributions)
    if reason is not None:
        with _lock:
            undo = _disarm(st)
            st.state, st.reason = SKIPPED, reason
        _revert_all([undo])
        from mpcompat.errors import PatchUnavailable  # only when raising: a module less to load
        raise PatchUnavailable("patch %r cannot apply: %s" % (st.spec.name, reason))


def _warn(st, message):
    activation.warn("patch %r %s" % (st.spec.name, message))
