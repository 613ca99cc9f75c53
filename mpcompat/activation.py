"""Activation: mpcompat's built-in reducers plus the library patches, switched as one, and the
post-import hook that drives both.

It runs in every process that imports a module mpcompat acts on, so it only watches
``copyreg`` and the patch targets: the built-in reducers (defined here, with the reducer
registry's state; :mod:`mpcompat.reducers` holds its functions and loads when they are used)
register when copyreg is imported; the standard library's targets get first-use stubs, whose
first call applies their patches (``mpcompat.patcher.apply_standard``), and the patch manager
loads with the first target of another library, or when ``status()`` or a declining patch
needs it.

The hook: ``watch(name, callback)`` calls back each time a module finishes executing. A finder
at the front of ``sys.meta_path``, a dict look-up for names nobody watches, chains the loader
the finders behind it give: the callbacks run right after the module's code, once per
execution (import and reload alike), under the module's import lock. A watched submodule done
while its watched top-level package still runs (torch's) is called back when the package is
done: nothing can use it before, and what the patches import costs less then.
"""
import os
import sys
from _thread import RLock

# (mpcompat/__init__.py says why not "from mpcompat import rebuild_views")
rebuild_views = __import__("mpcompat.rebuild_views", fromlist=["rebuild_dict_keys"])

try:  # the C type itself: importing collections costs start-up time
    from _collections import OrderedDict
except ImportError:  # pragma: no cover (an implementation without _collections)
    from collections import OrderedDict

def process_lock(locks):
    """This process's lock in ``locks`` (a dict, pid -> RLock), made on first use (an atomic
    ``setdefault``): a forked child never waits for one a thread of its parent held at the fork.
    Each ``Patcher`` and ``ExceptHooks`` uses it too."""
    return locks.get(os.getpid()) or locks.setdefault(os.getpid(), RLock())


_locks = {}  # pid -> activation's lock in that process

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


hook = _PostImportFinder()  # the one finder; _mpcompat_bootstrap hands it its triggers


def watch(name, callback):
    """Call ``callback(module)`` each time module ``name`` finishes executing from now on."""
    callbacks = _callbacks.setdefault(name, [])
    if callback not in callbacks:
        callbacks.append(callback)
    if hook not in sys.meta_path:
        sys.meta_path.insert(0, hook)


def unwatch(name, callback):
    """Stop calling ``callback`` for module ``name``. The finder stays on sys.meta_path (a dict
    look-up for a name nobody watches): an import in another thread iterates that very list,
    and a finder taken out in front of it makes it skip the next one (the path finder: a
    ModuleNotFoundError for a module that exists)."""
    callbacks = _callbacks.get(name, [])
    if callback in callbacks:
        callbacks.remove(callback)
    if not callbacks:
        _callbacks.pop(name, None)


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


_state = {"active": False, "how": "not activated yet", "conflicts": []}
# arm: patching.arm()'s arguments, till called; fired: a first use applied the standard
# library's patches without the patch manager (mpcompat.patcher.apply_standard)
_config = {"watched": frozenset(), "arm": None, "fired": False}
_standard = []  # what apply_standard applied: (name, module, exception, loaded), till adopted
_registered = {}  # the built-in reducers activation registered: {type: reducer}


def env_disabled():
    """Whether ``MPCOMPAT_DISABLE`` asks for mpcompat to stay off in this process tree."""
    return os.environ.get("MPCOMPAT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def builtin_reducers():
    """Return ``{type: reducer}`` for the reducers that activation registers."""
    return dict(BUILTIN_REDUCERS)


def activate(*, patches=None, disabled_patches=None):
    """Register mpcompat's reducers and arm its library patches.

    patches: names of patches to apply (each must be able to apply, else PatchUnavailable);
    None applies every patch. disabled_patches: names, or ``"*"``, to turn off; None reads
    ``MPCOMPAT_DISABLED_PATCHES``. Calling it again re-configures.
    """
    _activate(patches, disabled_patches, "activated by mpcompat.activate()")


def _activate(patches, disabled_patches, how):
    targets = None
    if patches is None and disabled_patches is None and "mpcompat.patching" not in sys.modules \
            and not os.environ.get("MPCOMPAT_DISABLED_PATCHES", "").strip():
        targets = getattr(sys.modules.get("_mpcompat_bootstrap"), "watched", lambda: None)()
    if targets is not None and not any(t in sys.modules for t in targets):
        # the table loads, and the patches are armed, with the first target
        with process_lock(_locks):
            _config["arm"] = "all"
            _start(how, targets)
        return
    patching = __import__("mpcompat.patching", fromlist=["PATCHES"])  # (as rebuild_views)
    rows = patching.PATCHES  # read once: a test may swap in a table of its own
    known, names = [spec.name for spec in rows], patching.parse_names
    requested = set(known) if patches is None else names(patches, "patches", known)
    if disabled_patches is None:
        disabled = names(os.environ.get("MPCOMPAT_DISABLED_PATCHES", ""),
                         "MPCOMPAT_DISABLED_PATCHES", known, strict=False)
        disabled_by = "disabled by MPCOMPAT_DISABLED_PATCHES"
    else:
        disabled = names(disabled_patches, "disabled_patches", known)
        disabled_by = "disabled by activate(disabled_patches=...)"
    live = {t for spec in rows if not spec.env_off() for t in spec.targets}
    with process_lock(_locks):
        _config["arm"] = (rows, frozenset(requested - disabled),
                          disabled_by if disabled else None)
        _start(how, live)
        if patches is None and not patching.armed_before() \
                and not any(t in sys.modules for t in live):
            return  # the patches are armed when a target is imported
        armed, undo = _arm(patching)
    patching.revert(undo)
    patching.apply_imported(armed, imported)
    for name in sorted(requested - disabled if patches is not None else ()):
        patching.require(name)


def _start(how, targets):
    """Turn on, watch copyreg and ``targets`` (the caller holds the lock)."""
    _state.update(active=True, how=how)
    if "copyreg" in sys.modules:
        _register_builtins()
    else:
        watch("copyreg", _on_copyreg)
    for target in _config["watched"] - targets:
        unwatch(target, _on_target)
    for target in targets:
        watch(target, _on_target)
    _config["watched"] = frozenset(targets)


def _arm(patching):
    """Arm the patches as configured (the caller holds the lock): see patching.arm()."""
    args, rows = _config["arm"], patching.PATCHES
    every = (rows, frozenset(spec.name for spec in rows), None)
    if args == "all":  # activated with the start-up hook's list of targets: every patch
        _start(_state["how"], {t for spec in rows if not spec.env_off() for t in spec.targets})
        args = every
    if _standard:  # applied with every patch on: adopted so, before any is disarmed
        patching.arm(*every)
        patching.adopt_applied(_standard)
        del _standard[:]
    armed = patching.arm(*args)
    if _early:  # the manager takes over the stubs put on before it loaded
        patching.adopt(dict(_early))
        _early.clear()
    # Last: ensure_armed() reads it without the lock, and a thread that sees None goes on to
    # apply, which needs every patch armed and every stub adopted.
    _config["arm"] = None
    return armed


def ensure_armed():
    """Arm the patches if mpcompat is active and not armed yet; return mpcompat.patching."""
    patching = __import__("mpcompat.patching", fromlist=["PATCHES"])  # (as rebuild_views)
    if _config["arm"] is not None:
        with process_lock(_locks):  # bookkeeping only: nothing imported or applied under it
            if _config["arm"] is not None:
                _arm(patching)  # nothing is applied yet: nothing to undo
    return patching


def _on_copyreg(module):
    unwatch("copyreg", _on_copyreg)
    if _state["active"]:
        try:
            _register_builtins()
        except Exception as exc:
            _warn_failure("dict views and modules stay unpicklable", exc)


def _register_builtins():
    import copyreg
    conflicts = []
    for cls, reducer in BUILTIN_REDUCERS.items():
        try:
            claim(copyreg.dispatch_table, cls, reducer)
            _registered[cls] = reducer
        except ValueError as exc:
            conflicts.append(type_name(cls))
            from mpcompat.errors import warn
            warn("left %s alone: %s" % (conflicts[-1], exc))
    _state["conflicts"] = conflicts


def _on_target(module):
    """The one callback for every patch target: hand the module to the patch manager, or,
    before it has loaded, put on the module's first-use stubs (:data:`EARLY_FIRST_USES`) or
    apply its standard-library patches without it (:func:`_standard_now`)."""
    if _state["active"]:
        try:
            if _stub_early(module):
                return
            if _standard_now(module):  # (known again under the lock)
                _load_standard([module.__name__])
            with process_lock(_locks):
                standard = _standard_now(module)
                declined = standard and _apply_standard([module])
            if not standard:
                ensure_armed().on_module(module)
            elif declined:
                ensure_armed()  # the manager adopts what was applied, and says why one declined
        except Exception as exc:
            _warn_failure("%s is not patched" % module.__name__, exc)


def _warn_failure(what, exc):
    """The user's import goes on: the failure is said, once for one cause, not dropped."""
    from mpcompat.errors import describe_exception, warn
    cause = describe_exception(exc)
    warn("%s: %s" % (what, cause), key=cause)


def deactivate():
    """Undo :func:`activate`: revert every patch and remove the built-in reducers."""
    if _standard:
        ensure_armed()  # the patch manager takes over what was applied without it, to revert it
    with process_lock(_locks):
        for target in _config["watched"]:
            unwatch(target, _on_target)
        unwatch("copyreg", _on_copyreg)
        if not _callbacks:  # a new list: an import iterating the old one in a thread goes on
            sys.meta_path = [finder for finder in sys.meta_path if finder is not hook]
        _state.update(active=False, how="deactivated by mpcompat.deactivate()", conflicts=[])
        _config.update(watched=frozenset(), arm=None, fired=False)
        patching = sys.modules.get("mpcompat.patching")
        undo = patching.disarm_all() if patching is not None else []
        for _, stubs in _early.values():
            for owner, name, original, stub in stubs:
                if owner.__dict__.get(name) is stub:  # what somebody set after us stays theirs
                    setattr(owner, name, original)
        _early.clear()
        if _registered:
            import copyreg
            for cls, reducer in list(_registered.items()):
                release(copyreg.dispatch_table, cls, reducer)  # not a user's override
            _registered.clear()
    if patching is not None:
        patching.revert(undo)


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
    if calls and getattr(boot, "outcome", None) in getattr(boot, "ARMED", ()):
        route = {"mpcompat run": "'mpcompat run'"}.get(calls[0], calls[0])
        how = "activated at start-up by " + route
        boot.outcome = "activated"  # (by a trigger's import, or by the user's before any)
    else:
        how = "activated by import mpcompat"
    _activate(None, None, how)


# --- first-use stubs ------------------------------------------------------------------------
# The standard library's patch targets whose always-on patches all wait for a first use (their
# rows' first_use in patching.PATCHES; tests/core/test_patching.py checks it). Imported before
# the patch manager has loaded, they get their stubs here; the manager, loaded by the first call
# of one (or by status(), or by another target), adopts them (patching.adopt). A process that
# imports multiprocessing and never starts a process never loads it.
EARLY_FIRST_USES = {
    "multiprocessing.reduction": ("dump", "ForkingPickler.dumps"),
    "multiprocessing.spawn": ("get_preparation_data", "_main", "prepare"),
    "multiprocessing.process": ("BaseProcess.start", "BaseProcess._bootstrap"),
    "multiprocessing.forkserver": ("connect_to_new_process",),
    "multiprocessing.popen_fork": ("Popen.__init__",),
    "multiprocessing.popen_forkserver": ("Popen.__init__",),
    "multiprocessing.pool": ("Pool.__init__", "worker"),
    "concurrent.futures.process": ("ProcessPoolExecutor.__init__", "_process_worker"),
}
EARLY_OFF_ENV = "MPCOMPAT_HANG_DUMP"  # set, a patch of two of them applies as they are imported
_early = {}  # target name -> (module, [(owner, name, original, stub), ...]): put on here
_FUNCTION = type(process_lock)


def _stub_early(module):
    """Put the first-use stubs of ``module`` on it, where it is one of EARLY_FIRST_USES and the
    patch manager is not armed yet; return whether it did (else the manager takes it)."""
    entries = EARLY_FIRST_USES.get(module.__name__)
    # (a spawn child: its start is a first use; they apply as they are imported: _standard_now)
    if entries is None or _config["arm"] != "all" or _config["fired"] \
            or os.environ.get(EARLY_OFF_ENV, "").strip() \
            or "--multiprocessing-fork" in sys.argv or child_starting():
        return False
    spots = first_use_spots(module, entries)
    if len(spots) < len(entries):
        return False  # one is not a function here: the manager decides what to do
    with process_lock(_locks):
        if _config["arm"] != "all" or _config["fired"]:  # meanwhile, in another thread
            return False
        stubs = _early.get(module.__name__, (None, []))[1]
        _early[module.__name__] = (module, stubs)  # (a module executed again: the new one)
        for owner, name, _ in spots:
            original = owner.__dict__[name]
            if stands_for(original) is None:
                stub = first_use_stub(owner, name, module.__name__)
                setattr(owner, name, stub)
                stubs.append((owner, name, original, stub))
    return True


def first_use_spots(module, entries):
    """``(owner, name, path)`` for each of ``entries`` (attribute paths of ``module``,
    "Pool.__init__") that is a function or classmethod there: what a stub can stand in for."""
    spots = []
    for path in entries:
        owner_path, _, name = path.rpartition(".")
        owner = module
        for part in owner_path.split(".") if owner_path else ():
            owner = getattr(owner, part, None)
        value = getattr(owner, "__dict__", {}).get(name)
        if isinstance(getattr(value, "__func__", value), _FUNCTION):
            spots.append((owner, name, path))
    return spots


def first_use_stub(owner, name, module_name):
    """A stand-in for the function or classmethod ``owner.name`` of module ``module_name``: its
    first call applies the deferred patches of that module's group (``patching.apply_deferred``;
    in the caller's thread, never a Pool's helper thread, which only runs once a Pool is made),
    then it calls what is there now. Named as the original, it pickles by reference as it
    did."""
    original = owner.__dict__[name]
    # a classmethod's function; a bound method (forkserver's module-level functions) is called
    function = original.__func__ if isinstance(original, classmethod) else original
    fired, beneath = [], []  # beneath: the patched function, under a wrapper that replaced us

    def first_use(*args, **kwargs):
        try:
            if not fired:
                _first_use(module_name)
                fired.append(True)
            if beneath:  # somebody's wrapper replaced the stub before the patch went on
                return beneath[0](*args, **kwargs)
            current = owner.__dict__.get(name)
            # Still ours (the patch declined): the original. Else the call comes from what is
            # there now (a wrapper somebody made around the stub, which the patch went over:
            # the original), or from a caller that looked the stub up before the patch went
            # on (what is there now).
            if current is stub or _called_from(
                    getattr(getattr(current, "__func__", current), "__code__", None)):
                return function(*args, **kwargs)
            if function is original:
                return getattr(owner, name)(*args, **kwargs)
            return getattr(args[0], name)(*args[1:], **kwargs)  # a classmethod: cls first
        except BaseException as exc:  # the user reads their frames, not this stub's
            from mpcompat.workers.user_frames import drop_own_frames
            drop_own_frames(exc)
            raise
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(first_use, attr, getattr(function, attr))
    first_use.__wrapped__, first_use.mpcompat_first_use = function, True
    first_use.mpcompat_original, first_use.mpcompat_beneath = original, beneath
    stub = first_use if function is original else classmethod(first_use)
    return stub


# The code every stub runs: what tells one (a wrapper made with functools.wraps copies a
# stub's attributes, not its code).
_STUB_CODE = next(c for c in first_use_stub.__code__.co_consts if getattr(c, "co_name", "")
                  == "first_use")


def stands_for(value):
    """The original that ``value`` stands for where it is a first-use stub (a patch applied
    over a stub wraps that original), else None."""
    function = value.__func__ if type(value) is classmethod else value
    if type(function) is _FUNCTION and function.__code__ is _STUB_CODE:
        return function.mpcompat_original
    return None


def _called_from(code, depth=16):
    """Whether a caller of the stub that calls this (up to ``depth`` frames out) runs ``code``
    (True where there is none to look for)."""
    if code is None:
        return True
    frame = sys._getframe(2)
    while frame is not None and depth:
        if frame.f_code is code:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _first_use(module_name):
    """The first call of a stub on ``module_name``: apply the deferred patches of its group.
    Activation's own stubs (the patch manager not loaded, every patch on) are all on the
    standard library's worker targets, one group: their patches apply without the manager,
    under activation's lock (a thread calling another stub meanwhile waits for them)."""
    if _config["arm"] == "all":
        _load_standard(list(_early))
    with process_lock(_locks):
        early = None
        if _config["arm"] == "all" and (_early or _config["fired"]):
            _config["fired"], early = True, list(_early.values())
            _early.clear()
            # Over the stubs, then the stubs left are taken out: a thread never finds the
            # original between the two (it would start a child the patches never see).
            try:
                declined = _apply_standard([module for module, _ in early], [
                    (owner, name, stub) for _, stubs in early for owner, name, _, stub in stubs])
                for _, stubs in early:
                    for owner, name, original, stub in stubs:
                        if owner.__dict__.get(name) is stub:  # what somebody set after us stays
                            setattr(owner, name, original)
            except BaseException:
                _interrupted(early)
                raise
    if early is None:
        ensure_armed().apply_deferred(module_name)
    elif declined:
        ensure_armed()


def _interrupted(early):
    """A first use cut short (a Ctrl-C: ``apply_standard`` stops only for what it cannot
    catch): the targets whose stubs are still on wait for the next first use, which applies
    their patches again (each is idempotent); their records so far go, so none counts twice."""
    again = {}
    for module, stubs in early:
        left = [(owner, name, original, stub) for owner, name, original, stub in stubs
                if owner.__dict__.get(name) is stub]
        if left:
            again[module.__name__] = (module, left)
    _standard[:] = [record for record in _standard if record[1].__name__ not in again]
    _early.update(again)


def _standard_now(module):
    """Whether the standard library's patches of ``module`` apply as it is imported, without
    the patch manager: it is not loaded, every patch is on, and this is a child starting (spawn,
    forkserver) or a first use has come (read under the lock to act on it)."""
    return module.__name__ in EARLY_FIRST_USES and _config["arm"] == "all" and not \
        os.environ.get(EARLY_OFF_ENV, "").strip() and (
            _config["fired"] or "--multiprocessing-fork" in sys.argv or child_starting())


def _load_standard(targets):
    """``mpcompat.patcher.load_standard``, outside the lock."""
    from mpcompat.patcher import load_standard
    load_standard(targets)


def _apply_standard(modules, stubs=()):
    """``mpcompat.patcher.apply_standard`` over ``stubs``, under the lock (its modules loaded
    before it was taken): records kept for the manager; whether one declined."""
    from mpcompat.patcher import apply_standard, beneath_wrappers
    return beneath_wrappers(stubs, lambda: apply_standard(modules, _standard))


def child_starting():
    """Whether this process is a spawn or forkserver child unpickling what its parent sent (it
    activated late, inside ``spawn._main``: no stub would fire before a failure there)."""
    process = sys.modules.get("multiprocessing.process")
    return bool(process) and getattr(process.current_process(), "_inheriting", False)


# --- the reducer registry's state, and the built-in reducers ---------------------------------
# Here, not in mpcompat.reducers (the registry's functions), so that registering the built-in
# reducers as copyreg is imported loads no module more: the registry loads when it is used.

MISSING = object()
# cls -> (reducer, the copyreg entry before mpcompat first registered cls, or MISSING)
registry = {}
registry_locks = {}  # pid -> the registry's lock in that process


def type_name(cls):
    """``module.qualname`` of ``cls``, as the registry's messages name it."""
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def claim(table, cls, reducer, override=False):
    """Make ``reducer`` copyreg's entry in ``table`` (``copyreg.dispatch_table``) for ``cls``
    and record it in the registry; return it. The same reducer again is a no-op; replacing an
    entry (mpcompat's or another package's) raises ``ValueError`` unless ``override``."""
    with process_lock(registry_locks):
        current = table.get(cls, MISSING)
        entry = registry.get(cls)
        if entry is not None and current is reducer and entry[0] is reducer:
            return reducer
        if not override and current is not MISSING:
            owner = "mpcompat" if entry is not None and current is entry[0] else "another package"
            raise ValueError("cls %s already has a copyreg reducer (%r, registered by %s); pass "
                             "override=True to replace it" % (type_name(cls), current, owner))
        registry[cls] = (reducer, current if entry is None else entry[1])
        table[cls] = reducer
    return reducer


def release(table, cls, reducer=None):
    """Drop the registry's entry for ``cls`` (only while it holds ``reducer``, when given) and
    put back in ``table`` the entry it replaced, unless something else replaced mpcompat's
    since; return whether there was one to drop."""
    with process_lock(registry_locks):
        entry = registry.get(cls)
        if entry is None or reducer is not None and entry[0] is not reducer:
            return False
        del registry[cls]
        if table.get(cls, MISSING) is entry[0]:
            put(table, cls, entry[1])
    return True


def put(table, cls, value):
    """``table[cls] = value``, or remove ``cls`` from it if ``value`` is MISSING."""
    if value is MISSING:
        table.pop(cls, None)
    else:
        table[cls] = value


# The built-in reducers: the six dict views, which no CPython version pickles (a keys view
# ships its keys, a values view its values, an items view a copy of the mapping: nothing else of
# the dict, cloudpickle's choice too; mpcompat.rebuild_views rebuilds them on a fresh dict of the
# same kind), and module objects, which pickle as their import name (mmcv before 1.4.8 keeps the
# modules a config file imports inside Config; the standard library refuses them).

VIEW_REDUCERS = {}  # view type -> its reducer


def _view_reducer(view):
    # On the pickling hot path: one Python call per view, no attribute look-ups. Keys and values
    # travel as the reduce arguments themselves (rebuild(*keys)), which saves the pickler a list
    # object and a memo entry per view; items travel as a dict.
    kind = type(view).__name__
    rebuild = getattr(rebuild_views, "rebuild_" + kind)
    if kind.endswith("_items"):
        def reduce(view, _dict=dict, _rebuild=rebuild):
            return _rebuild, (_dict(view),)
    else:
        def reduce(view, _tuple=tuple, _rebuild=rebuild):
            return _rebuild, _tuple(view)
    reduce.__name__ = reduce.__qualname__ = "reduce_" + kind
    reduce.__doc__ = "Reduce a view of type ``%s`` for ``mpcompat.rebuild_views.%s``." % (
        kind, rebuild.__name__)
    VIEW_REDUCERS[type(view)] = reduce
    return reduce


reduce_dict_keys = _view_reducer({}.keys())
reduce_dict_values = _view_reducer({}.values())
reduce_dict_items = _view_reducer({}.items())
reduce_odict_keys = _view_reducer(OrderedDict().keys())
reduce_odict_values = _view_reducer(OrderedDict().values())
reduce_odict_items = _view_reducer(OrderedDict().items())

MODULE_TYPE = type(sys)  # types.ModuleType, without importing types (start-up time)
# A child process has a __main__ of its own; the parent's cannot be imported there by name.
_UNIMPORTABLE = frozenset(["__main__", "__mp_main__"])


def reduce_module(module, _modules=sys.modules):
    """Reduce a module to its import name; refuse one the receiving process cannot import."""
    # TypeError, as the standard library raises for every module: callers catching it still do.
    name = getattr(module, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(
            "cannot pickle module %r: it has no __name__ to import it by" % (module,))
    if name in _UNIMPORTABLE:
        raise TypeError(
            "cannot pickle module %r: a child process has a __main__ module of its own, not "
            "this one. Keep a reference to an importable module instead, or move what it "
            "provides into one." % name)
    if _modules.get(name) is not module:
        raise TypeError(
            "cannot pickle module %r: sys.modules[%r] is %s, so a child process importing %r "
            "would not get this module (modules loaded from files under temporary names, such "
            "as config files, cannot be imported by name). Keep the values it defines instead "
            "of the module itself." % (
                name, name, "missing" if name not in _modules else "another object", name))
    from mpcompat.rebuild import rebuild_module
    return rebuild_module, (name,)


BUILTIN_REDUCERS = dict(VIEW_REDUCERS)
BUILTIN_REDUCERS[MODULE_TYPE] = reduce_module
