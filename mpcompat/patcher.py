"""What every patch module uses to change a library (``Patcher``, ``Skip``, ``NotNeeded``,
``ExceptHooks``), and :func:`apply_standard`: the standard library's patches of activation's
early targets applied without the patch manager (``mpcompat.patching``), which a process that
only starts processes or makes a Pool never loads (pay on failure: it loads for ``status()``,
``deactivate()``, another target, or to say why a patch declined).

- ``Patcher`` is the one way a patch changes a library (gevent.monkey's saved originals):
  replace an attribute or a registry's item, remember the original, put it back only where ours
  is still in place. Threads may apply and revert one patch at once: each change is made under
  the patcher's lock. A first-use stub of activation's counts as the original it stands for: a
  patch applies over it, so that no thread finds the bare original in between.
"""
import sys

from mpcompat.activation import process_lock, stands_for

_CHILDREN = "mpcompat.patches.mp_children:"
# The always-on patches of each of activation.EARLY_FIRST_USES, in the table's order: (name,
# impl) as in mpcompat.patching.PATCHES (tests/core/test_patching.py checks it).
STANDARD = {
    "multiprocessing.reduction": (("multiprocessing.pickling_notes",
                                   _CHILDREN + "pickling_notes"),),
    "multiprocessing.spawn": (("multiprocessing.bootstrap_notes", _CHILDREN + "bootstrap_notes"),
                              ("multiprocessing.failure_records", _CHILDREN + "failure_records")),
    "multiprocessing.process": (("multiprocessing.failure_records",
                                 _CHILDREN + "failure_records"),),
    "multiprocessing.forkserver": (("multiprocessing.failure_records",
                                    _CHILDREN + "failure_records"),),
    "multiprocessing.popen_fork": (("multiprocessing.exit_evidence",
                                    _CHILDREN + "exit_evidence"),),
    "multiprocessing.popen_forkserver": (("multiprocessing.exit_evidence",
                                          _CHILDREN + "exit_evidence"),),
    "multiprocessing.pool": (("multiprocessing.pool_workers", "mpcompat.patches.mp_pool_workers"),),
    "concurrent.futures.process": (("concurrent_futures.process_workers",
                                    "mpcompat.patches.futures_process_workers"),),
}


def implementation(impl):
    """What a table row's ``impl`` names (``"module"`` or ``"module:object"``), imported if need
    be: what has the patch's ``apply`` and ``revert``."""
    path, _, name = impl.partition(":")
    __import__(path)  # importlib.import_module's work for an absolute name, without importlib
    module = sys.modules[path]
    if not name:
        return module
    try:
        return getattr(module, name)
    except AttributeError:  # said as Python says it of a from-import
        raise ImportError("cannot import name %r from %r" % (name, path)) from None


def load_standard(targets):
    """Import the modules of the patches of :data:`STANDARD` for ``targets`` (names): before
    activation's lock is taken, so that its holder never waits for an import another thread
    holds (one of a target, whose callback waits for that lock). Never raises: what fails
    fails again in :func:`apply_standard`, which says it."""
    for target in targets:
        for _, impl in STANDARD.get(target, ()):
            try:
                __import__(impl.partition(":")[0])
            except Exception:
                pass


def apply_standard(modules, records):
    """Apply the patches of :data:`STANDARD` to ``modules`` (targets of
    ``activation.EARLY_FIRST_USES``), as the patch manager would with every patch on: append
    ``(patch name, module, exception or None, whether its code loaded)`` to ``records`` for the
    manager to adopt (``patching.adopt_applied``); return whether one declined or failed (the
    manager says why). Never raises."""
    declined = False
    for module in modules:
        for name, impl in STANDARD.get(module.__name__, ()):
            loaded, error = False, None
            try:
                code = implementation(impl)
                loaded = True
                code.apply(module)
            except Exception as exc:
                error, declined = exc, declined or not isinstance(exc, NotNeeded)
            records.append((name, module, error, loaded))
    return declined


def beneath_wrappers(stubs, apply):
    """Return ``apply()``, which applies patches over first-use ``stubs`` (``(owner, name,
    stub)``). Where somebody's function replaced a stub before its first use (a wrapper made
    around it: coverage's of ``BaseProcess._bootstrap``), the patch goes under it, as it would
    have gone had it applied at import: the stub is put back while ``apply`` runs, theirs after,
    and the stub calls what the patch put in its place (not the wrapper again, which called it).
    Called under the lock the stubs wait for."""
    replaced = []
    for owner, name, stub in stubs:
        value = owner.__dict__.get(name)
        if value is not None and value is not stub:
            setattr(owner, name, stub)
            replaced.append((owner, name, stub, value))
    try:
        return apply()
    finally:
        for owner, name, stub, value in replaced:
            patched = owner.__dict__.get(name)
            setattr(owner, name, value)
            if patched is not stub:
                _function(stub).mpcompat_beneath[:] = [_function(patched)]
                _beneath.append(_function(stub).mpcompat_beneath)


_beneath = []  # the stubs' lists that hold a patched function (beneath_wrappers)


def _function(value):
    return value.__func__ if type(value) is classmethod else value


class Skip(Exception):
    """Raised by a patch that declines to apply (the message says why): "skipped", with one
    warning per process tree."""


class NotNeeded(Skip):
    """Raised by a patch with nothing to do here: "not needed", silently."""


_ABSENT = object()


class Patcher(object):
    """Records ``(owner, name) -> original`` for every replacement one patch makes."""

    def __init__(self):
        self._locks = {}
        self._records = {}  # (id(owner), name, item) -> [owner, name, item, original, new, target]

    def replace(self, owner, name, new, target=None):
        """Set ``owner.name`` to ``new`` (as stored in ``owner.__dict__``: a ``classmethod``
        stays one, or a data descriptor's: ``__class__``, ``__qualname__``) and remember the
        first original; ``target``: the module it belongs to (default: the owner's)."""
        if target is None:
            target = owner.__name__ if type(owner).__name__ == "module" else getattr(
                owner, "__module__", None)
        return self._replace(owner, name, False, new, target)

    def replace_item(self, mapping, key, value, target):
        """:meth:`replace` for ``mapping[key]`` (``ForkingPickler._extra_reducers``)."""
        return self._replace(mapping, key, True, value, target)

    def adopt(self, owner, name, original, new, target):
        """Record ``owner.name`` as replaced by ``new`` (in place already) from ``original``:
        a replacement made before this patcher existed (activation's first-use stubs)."""
        with process_lock(self._locks):
            self._records[(id(owner), name, False)] = [owner, name, False, original, new, target]

    def wrap(self, owner, name, wrapper, target=None):
        """Replace ``owner.name`` with ``wrapt.FunctionWrapper(original, wrapper)`` (not for
        functions that must pickle by reference)."""
        import wrapt  # only here: patches of the standard library never import it
        original = self.original(owner, name)
        return self.replace(owner, name, wrapt.FunctionWrapper(original, wrapper), target)

    def original(self, owner, name):
        """What ``owner.name`` was before this patcher replaced it (what it is, otherwise; for
        a first-use stub of activation's, the original it stands for)."""
        with process_lock(self._locks):
            value = self._original(owner, name, False)
        if value is not _ABSENT:
            return value
        for base in getattr(owner, "__mro__", (owner,))[1:]:  # inherited: the raw descriptor
            if name in base.__dict__:
                return base.__dict__[name]
        return getattr(owner, name)

    def restore(self, module=None):
        """Put back the originals replaced for ``module`` (all when None) where ours is still
        in place: what somebody set after us stays theirs."""
        name = getattr(module, "__name__", module)
        with process_lock(self._locks):
            for key, (owner, attr, item, original, new, target) in list(self._records.items()):
                if name is None or target == name:
                    del self._records[key]
                    if _get(owner, attr, item) is new:
                        _put(owner, attr, item, original)
                    for beneath in _beneath:  # under a wrapper: its stub calls the original
                        if beneath and beneath[0] is _function(new):
                            del beneath[:]

    def made(self, target):
        """The ``(owner, name, replacement)`` triples made for ``target``."""
        with process_lock(self._locks):
            return [(r[0], r[1], r[4]) for r in self._records.values() if r[5] == target]

    def applied(self):
        """The ``(owner, name)`` pairs that hold a replacement of ours right now."""
        with process_lock(self._locks):
            return [(owner, name) for owner, name, item, _, new, _ in self._records.values()
                    if _get(owner, name, item) is new]

    def _replace(self, owner, name, item, new, target):
        with process_lock(self._locks):
            original = self._original(owner, name, item)
            _put(owner, name, item, new)
            self._records[(id(owner), name, item)] = [owner, name, item, original, new, target]
        return new

    def _original(self, owner, name, item):
        """The first original while ours is in place, else what is there now (see
        :meth:`original`)."""
        value = _get(owner, name, item)
        record = self._records.get((id(owner), name, item))
        if record is not None and value is record[4]:
            return record[3]
        original = stands_for(value)
        return value if original is None else original


def _get(owner, name, item):
    """``owner``'s own ``name`` (``_ABSENT`` if none): a mapping's item, its ``__dict__`` entry,
    else what a data descriptor of its type keeps (``__class__``)."""
    if item:
        return owner.get(name, _ABSENT)
    value = getattr(owner, "__dict__", {}).get(name, _ABSENT)
    if value is _ABSENT:
        slot = next((k.__dict__[name] for k in type(owner).__mro__ if name in k.__dict__), None)
        if hasattr(type(slot), "__set__"):
            value = getattr(owner, name)
    return value


def _put(owner, name, item, value):
    if item and value is _ABSENT:
        del owner[name]
    elif item:
        owner[name] = value
    elif value is _ABSENT:
        delattr(owner, name)
    else:
        setattr(owner, name, value)


class ExceptHooks(object):
    """The ``sys.excepthook`` one patch chains in front of the one in place: at most one of
    them is active. Each hook has ``active`` (it acts only then) and ``previous`` (which it
    calls after)."""

    def __init__(self):
        self._locks = {}
        self.installed = []

    def install(self, make):
        """Make ``sys.excepthook`` ``make(sys.excepthook)`` unless one of ours is active."""
        with process_lock(self._locks):
            if not self.active():
                self.installed.append(make(sys.excepthook))
                sys.excepthook = self.installed[-1]

    def remove(self):
        """Turn ours off; take out those still in place (one chained after ours stays: it
        calls ours, which passes everything on)."""
        with process_lock(self._locks):
            for hook in self.installed[::-1]:
                hook.active = False
                if sys.excepthook is hook:
                    sys.excepthook = hook.previous
                    self.installed.remove(hook)

    def active(self, pid=None):
        """Whether one of ours is active (and made in process ``pid``, if given)."""
        return any(h.active and (pid is None or h.pid == pid) for h in list(self.installed))
