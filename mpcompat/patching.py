"""The patch layer: how a patch is declared, the table of every patch, and the machinery that
applies them (one module: all of it loads when a process first needs it: a target not in
``activation.EARLY_FIRST_USES``, a patch switched off, ``status()``, ``deactivate()``, a patch
that declined).

- ``PatchSpec`` declares a patch, a row of ``PATCHES``, the one table; a patch module (under
  ``mpcompat.patches``) provides ``apply(module)`` and ``revert(module)``, called once per
  execution of a target module's code (activation's import hook); ``apply`` may raise ``Skip``
  (with a warning) or ``NotNeeded`` (silently) to decline.
- A patch applies to each target handed to :func:`on_module` where its library's version has
  the bug (else "not needed") and is tested or newer (an older one is "skipped", quietly); one
  that declines in its apply() (``Skip``) is "skipped", and one that raises or cannot load is
  "failed", each with one warning. activate() and deactivate() arm and disarm under
  activation's lock (bookkeeping only), then apply or revert outside it: a patch disarmed while
  an import applies it is reverted by whichever of the two comes last.
- A row's ``first_use`` defers its module: stubs on those functions load and apply it at the
  first call of one of them (:func:`apply_deferred`). The standard library's targets get theirs
  from activation before this module loads (``activation.EARLY_FIRST_USES``): it loads at the
  first call of one, or as anything else needs it, and adopts them (:func:`adopt`).
- Where every patch is on, those stubs' first call (and a spawn or forkserver child's imports of
  those targets) apply the standard library's patches without this module
  (``mpcompat.patcher.apply_standard``); it adopts them as it loads (:func:`adopt_applied`).
- ``Patcher``, ``Skip``, ``NotNeeded`` and ``ExceptHooks`` live in ``mpcompat.patcher``.
- Versions are read cheaply and compared leniently: ``2.13.0+cpu``, ``1.9.0a0+git1234`` and
  ``1.4.0rc1`` count as their release numbers. Read as a patch is about to apply: the package's
  ``__version__``, else the ``<name>-<version>.dist-info`` (``.egg-info``) directory beside it,
  and only then ``importlib.metadata`` (tens of milliseconds).
"""
import os
import sys
from _operator import itemgetter
from _thread import start_new_thread
from itertools import takewhile

# (activation imports this module when it first needs it: activation is complete by then)
from mpcompat.activation import (child_starting, first_use_spots, first_use_stub, process_lock,
                                 stands_for)
from mpcompat.patcher import NotNeeded, Patcher, Skip, beneath_wrappers, implementation


class PatchSpec(tuple):
    """One declared patch, immutable: a tuple with named fields (a namedtuple's class, and a
    class that sets its fields with ``object.__setattr__``, cost start-up time).

    name: the name users see in status() and MPCOMPAT_DISABLED_PATCHES.
    targets: module names; the patch applies to each when it finishes importing.
    distributions: whose version is checked, first found wins; empty for a standard-library
        target, checked against Python's version.
    supported: the tested versions, both ends, e.g. ">=1.9,<2.15" (``2.13.0+cpu`` is 2.13.0).
        Above it the patch still applies where it finds what it hooks, "untested" in status();
        below it, it stays off ("skipped", quietly).
    impl: what provides apply(module) and revert(module): a module, or
        ``"module:name"``, an object in it (several patches that always load together share
        one module).
    summary: one line for status().
    needed: the versions that have the bug ("" for all); elsewhere "not needed", silently.
    needs_env: an environment variable that turns the patch on (``MPCOMPAT_HANG_DUMP``);
        while it is unset the patch is "not needed" and its module is not even imported.
    first_use: {target: attribute paths ("Pool.__init__")}: on that target, the patch's module
        is not imported with it; stubs on those functions import and apply it at the first call
        of one of them (a process that never makes a Pool never loads the Pool patch).
    """

    __slots__ = ()
    FIELDS = ("name", "targets", "distributions", "supported", "impl", "summary", "needed",
              "needs_env", "first_use")
    name, targets, distributions, supported, impl, summary, needed, needs_env, first_use = (
        property(itemgetter(i)) for i in range(9))
    __hash__, __eq__, __ne__ = object.__hash__, object.__eq__, object.__ne__  # a record's identity

    def __new__(cls, name, targets, distributions, supported, impl, summary, needed="",
                needs_env="", first_use=None):
        return tuple.__new__(cls, (name, tuple(targets), tuple(distributions), supported, impl,
                                   summary, needed, needs_env, dict(first_use or {})))

    def __setattr__(self, name, value):
        raise AttributeError("a PatchSpec is immutable: a test uses a table of its own")

    def __repr__(self):
        return "PatchSpec(%r)" % self.name

    def env_off(self):
        """``"<needs_env> is not set"`` while the variable that turns the patch on is unset,
        else ``""``."""
        if self.needs_env and not os.environ.get(self.needs_env, "").strip():
            return "%s is not set" % self.needs_env
        return ""


# Versions

# No regular expressions: this module loads when the first patch target is imported, in
# processes that may never import ``re`` otherwise (3 ms). Each operator (longest first) and
# the values of cmp(version, bound) it accepts.
_OPERATORS = {">=": (0, 1), "<=": (-1, 0), "==": (0,), "!=": (-1, 1), ">": (1,), "<": (-1,)}
_listings = {}  # directory -> {normalized distribution name: version} of its metadata dirs


def parse(version):
    """The release numbers of ``version`` as a tuple of ints, or None if it has none."""
    text = (version or "").strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    release = "".join(takewhile(lambda char: char in "0123456789.", text))
    parts = release.rstrip(".").split(".")  # "3." is 3
    if not all(parts):
        return None
    return tuple(int(part) for part in parts)


def in_range(version, spec):
    """Whether ``version`` satisfies ``spec`` such as ``">=1.8,<2.14"`` ("" accepts every one
    with release numbers); ValueError for a bad spec."""
    release = parse(version)
    if release is None:
        return False
    for clause in spec.split(","):
        text = clause.strip()
        if not text:
            continue
        op = next((op for op in _OPERATORS if text.startswith(op)), "")
        bound = text[len(op):].strip().split(".")
        if not op or not all(part.isdigit() for part in bound):
            raise ValueError("bad version clause %r in %r" % (clause, spec))
        bound = tuple(int(part) for part in bound)
        # Both padded with zeros to the same length: 2.13 == 2.13.0.
        have, want = release + (0,) * len(bound), bound + (0,) * len(release)
        if (have > want) - (have < want) not in _OPERATORS[op]:
            return False
    return True


def newer_than(version, spec):
    """Whether ``version`` fails ``spec`` only by being above its upper bounds (``"3.16.0"``
    for ``">=3.8,<3.16"``)."""
    lower = ",".join(c for c in spec.split(",") if c.strip()[:1] not in ("<", "="))
    return not in_range(version, spec) and in_range(version, lower)


def python_version():
    """This interpreter's version, e.g. ``"3.11.7"``."""
    return "%d.%d.%d" % sys.version_info[:3]


def version_of(distributions, package):
    """``(distribution, version)`` of a library, or ``(None, None)``: ``package``'s
    ``__version__`` where it has one, else the first of ``distributions`` installed."""
    module = sys.modules.get(package)
    own = getattr(module, "__version__", None)
    own = str(own) if own is not None and parse(str(own)) is not None else None
    if own is not None and len(distributions) < 2:  # no need to look which one provides it
        return (distributions[0] if distributions else None), own
    for dist in distributions:
        version = _dist_info_version(dist, module)
        if version is not None:
            return dist, own or version
    if own is not None:
        return distributions[0], own
    from importlib import metadata
    for dist in distributions:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def _normal(name):
    """A distribution name as metadata directories spell it: ``nuscenes-devkit`` ->
    ``nuscenes_devkit`` (lower case, runs of ``-_.`` as one ``_``)."""
    name = name.lower().replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def _dist_info_version(dist, module):
    """The version in the name of ``dist``'s metadata directory beside ``module``, or None."""
    location = getattr(module, "__file__", None)
    if not location:
        return None
    directory = os.path.dirname(os.path.abspath(location))
    if os.path.basename(location).startswith("__init__."):
        directory = os.path.dirname(directory)
    if directory not in _listings:
        _listings[directory] = _metadata_dirs(directory)
    version = _listings[directory].get(_normal(dist))
    return version if parse(version) is not None else None


def _metadata_dirs(directory):
    """``{normalized name: version}`` of the metadata directories in ``directory``
    (``torch-2.13.0+cpu.dist-info``, ``mmcv-1.4.0-py3.8.egg-info``)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return {}
    egg_tag = "-py%d.%d" % sys.version_info[:2]
    found = {}
    for entry in entries:
        if entry.endswith((".dist-info", ".egg-info")) and "-" in entry:
            name, rest = entry.split("-", 1)
            version = rest.rsplit(".", 1)[0]
            if version.endswith(egg_tag):
                version = version[:-len(egg_tag)]
            found.setdefault(_normal(name), version)
    return found


# The table

# torch is tested at 1.9.1, 2.6.0, 2.13.0 and 2.14.1 (.ci/test); a newer release still applies.
TORCH, TORCH_TESTED, PYTHON_TESTED = ("torch",), ">=1.9,<2.15", ">=3.8,<3.16"
# The opencv-python wheels, in the order they are looked for.
OPENCV = ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
          "opencv-contrib-python")
IMPL = "mpcompat.patches."
CHILDREN = IMPL + "mp_children:"  # the patches every child start loads, one module
LOADER_ITER_INIT = "_MultiProcessingDataLoaderIter.__init__"  # a DataLoader's iter() with workers

PATCHES = (
    PatchSpec("torch.boolean_dispatch", targets=("torch._jit_internal",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_boolean_dispatch",
              summary="functions made by boolean_dispatch (F.max_pool2d, ...) pickle by "
                      "reference"),
    PatchSpec("torch.safe_globals", targets=("torch.serialization",), distributions=TORCH,
              supported=TORCH_TESTED, needed=">=2.4", impl=IMPL + "torch_safe_globals",
              summary="torch.load(weights_only=True) accepts mpcompat's view rebuild functions"),
    PatchSpec("torch.generator", targets=("torch",), distributions=TORCH, supported=TORCH_TESTED,
              impl=IMPL + "torch_generator",
              summary="a torch.Generator reaches spawn children with its state"),
    PatchSpec("torch.dataloader_workers",
              targets=("torch.utils.data._utils.worker", "torch.utils.data.dataloader"),
              distributions=TORCH, supported=TORCH_TESTED, impl=IMPL + "torch_dataloader_workers",
              first_use={"torch.utils.data.dataloader": (LOADER_ITER_INIT,),
                         "torch.utils.data._utils.worker": ("_worker_loop",)},
              summary="DataLoader workers: an unpicklable batch raises in the parent, and a "
                      "worker that dies is named there with its cause"),
    PatchSpec("torch.spawn_errors", targets=("torch.multiprocessing.spawn",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_spawn_errors",
              first_use={"torch.multiprocessing.spawn": ("start_processes",)},
              summary="torch.multiprocessing.spawn: a child that dies starting up is named with "
                      "its cause"),
    PatchSpec("torch.cuda_fork", targets=("torch.cuda",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_cuda_fork",
              first_use={"torch.cuda": ("_lazy_init",)},
              summary="'Cannot re-initialize CUDA in forked subprocess' names where the parent "
                      "started CUDA, where the child touched it, where it was forked, the fix"),
    PatchSpec("torch.worker_temp_dir", targets=("torch.utils.data.dataloader",),
              distributions=TORCH, supported=TORCH_TESTED,
              impl=IMPL + "torch_dataloader_workers:worker_temp_dir",
              first_use={"torch.utils.data.dataloader": (LOADER_ITER_INIT,)},
              summary="DataLoader workers keep their temporary files in the parent's temporary "
                      "directory: a killed worker leaves nothing behind"),
    PatchSpec("torch.elastic_errors", targets=("sys",), distributions=(), supported=PYTHON_TESTED,
              needs_env="TORCHELASTIC_ERROR_FILE", impl=IMPL + "torch_elastic_errors",
              summary="a torchrun rank that dies of an uncaught exception writes torch's error "
                      "file (what @record writes), mpcompat's cause included"),
    PatchSpec("torch.elastic_failures",
              targets=("torch.distributed.elastic.multiprocessing.errors",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_elastic_failures",
              summary="torchrun's failure summary names a rank that died without an error file "
                      "with its measured cause"),
    PatchSpec("torch.leftovers",
              targets=("torch.distributed.rendezvous", "torch.distributed.launcher.api",
                       "torch.cuda"),
              distributions=TORCH, supported=TORCH_TESTED, impl=IMPL + "torch_leftovers",
              first_use={"torch.distributed.rendezvous": ("_create_c10d_store",),
                         "torch.distributed.launcher.api": ("launch_agent",),
                         "torch.cuda": ("_lazy_init",)},
              summary="a port in use (EADDRINUSE) names the process holding it, and CUDA out "
                      "of memory as a process starts this user's orphans holding the GPU"),
    PatchSpec("torch.collective_hang_dump",
              targets=("torch.distributed.distributed_c10d", "torch.distributed"),
              distributions=TORCH, supported=TORCH_TESTED, needs_env="MPCOMPAT_HANG_DUMP",
              impl=IMPL + "torch_collective_hang_dump",
              summary="with MPCOMPAT_HANG_DUMP=SECONDS, a collective waited in for too long "
                      "names the ranks that are not in it, with their stacks (any node)"),
    PatchSpec("nuscenes.detection_config", targets=("nuscenes.eval.detection.data_classes",),
              distributions=("nuscenes-devkit",), supported=">=1.1,<1.3",
              impl=IMPL + "nuscenes_detection_config",
              first_use={"nuscenes.eval.detection.data_classes": ("DetectionConfig.__init__",)},
              summary="DetectionConfig.class_names is a list in class_range order"),
    PatchSpec("nuscenes.tracking_config", targets=("nuscenes.eval.tracking.data_classes",),
              distributions=("nuscenes-devkit",), supported=">=1.1,<1.3",
              impl=IMPL + "nuscenes_tracking_config",
              first_use={"nuscenes.eval.tracking.data_classes": ("TrackingConfig.__init__",)},
              summary="an unpickled TrackingConfig restores the module state its __init__ sets"),
    PatchSpec("mmdet.shared_infos", targets=("mmdet.datasets.custom",),
              distributions=("mmdet",), supported=">=2.14,<3.0", needs_env="MPCOMPAT_SHARED_INFOS",
              impl=IMPL + "mmdet_shared_infos",
              first_use={"mmdet.datasets.custom": ("CustomDataset.__init__",)},
              summary="with MPCOMPAT_SHARED_INFOS=1, CustomDataset.data_infos is a read-only "
                      "mpcompat.shared_list: DataLoader workers share it"),
    PatchSpec("mmdet3d.shared_infos", targets=("mmdet3d.datasets.custom_3d",),
              distributions=("mmdet3d",), supported=">=0.17,<1.0",
              needs_env="MPCOMPAT_SHARED_INFOS", impl=IMPL + "mmdet_shared_infos",
              first_use={"mmdet3d.datasets.custom_3d": ("Custom3DDataset.__init__",)},
              summary="with MPCOMPAT_SHARED_INFOS=1, Custom3DDataset.data_infos is a read-only "
                      "mpcompat.shared_list: DataLoader workers share it"),
    PatchSpec("opencv.worker_threads", targets=("cv2",), distributions=OPENCV,
              supported=">=4.5,<5.1", impl=IMPL + "opencv_worker_threads",
              summary="OpenCV runs single-threaded, OpenCL off, in DataLoader workers and "
                      "forked children"),
    PatchSpec("multiprocessing.pickling_notes", targets=("multiprocessing.reduction",),
              distributions=(), supported=PYTHON_TESTED, impl=CHILDREN + "pickling_notes",
              first_use={"multiprocessing.reduction": ("dump", "ForkingPickler.dumps")},
              summary="a pickling error while starting a process or sending a task or result "
                      "says what, where and why"),
    PatchSpec("multiprocessing.bootstrap_notes", targets=("multiprocessing.spawn",),
              distributions=(), supported=PYTHON_TESTED, impl=CHILDREN + "bootstrap_notes",
              first_use={"multiprocessing.spawn": ("get_preparation_data", "_main")},
              summary="a child that fails to start says why (main guard, objects defined under "
                      "it) and its parent learns it"),
    PatchSpec("multiprocessing.failure_records",
              targets=("multiprocessing.process", "multiprocessing.spawn",
                       "multiprocessing.forkserver"),
              distributions=(), supported=PYTHON_TESTED, impl=CHILDREN + "failure_records",
              first_use={"multiprocessing.process": ("BaseProcess.start",
                                                     "BaseProcess._bootstrap"),
                         "multiprocessing.spawn": ("get_preparation_data", "prepare"),
                         "multiprocessing.forkserver": ("connect_to_new_process",)},
              summary="a child's start-up error reaches its parent (a socket the parent owns); "
                      "a plain Process's is named once in the parent"),
    PatchSpec("multiprocessing.exit_evidence",
              targets=("multiprocessing.popen_fork", "multiprocessing.popen_forkserver"),
              distributions=(), supported=PYTHON_TESTED, impl=CHILDREN + "exit_evidence",
              first_use={"multiprocessing.popen_fork": ("Popen.__init__",),
                         "multiprocessing.popen_forkserver": ("Popen.__init__",)},
              summary="a dead child's end is measured: OOM kill counters as it starts, its peak "
                      "memory (os.wait4) as it is reaped"),
    PatchSpec("multiprocessing.pool_workers", targets=("multiprocessing.pool",), distributions=(),
              supported=PYTHON_TESTED, impl=IMPL + "mp_pool_workers",
              first_use={"multiprocessing.pool": ("Pool.__init__", "worker")},
              summary="a Pool whose workers die starting up fails fast with their error; "
                      "unpicklable results are named"),
    PatchSpec("concurrent_futures.process_workers", targets=("concurrent.futures.process",),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "futures_process_workers",
              first_use={"concurrent.futures.process": ("ProcessPoolExecutor.__init__",
                                                        "_process_worker")},
              summary="a ProcessPoolExecutor whose worker dies names the worker, its exit code "
                      "or signal, and its recorded error"),
    PatchSpec("concurrent_futures.interpreter_workers",
              targets=("concurrent.futures.interpreter",), distributions=(),
              supported=PYTHON_TESTED, needed=">=3.14", impl=IMPL + "futures_interpreter_workers",
              summary="an InterpreterPoolExecutor task whose arguments or result cannot be sent "
                      "between interpreters names what and why"),
    PatchSpec("multiprocessing.hang_dump",
              targets=("multiprocessing.pool", "multiprocessing.process"), distributions=(),
              supported=PYTHON_TESTED, needs_env="MPCOMPAT_HANG_DUMP",
              impl=IMPL + "mp_hang_dump",
              summary="with MPCOMPAT_HANG_DUMP=SECONDS, a Pool/ThreadPool result waited for too "
                      "long dumps the stacks of this process and its workers"),
    PatchSpec("concurrent_futures.hang_dump", targets=("concurrent.futures._base",),
              distributions=(), supported=PYTHON_TESTED, needs_env="MPCOMPAT_HANG_DUMP",
              impl=IMPL + "futures_hang_dump",
              summary="with MPCOMPAT_HANG_DUMP=SECONDS, a concurrent.futures future waited for "
                      "too long dumps the stacks of this process and its workers"),
    PatchSpec("torch.hang_dump",
              targets=("torch.utils.data.dataloader", "torch.multiprocessing.spawn"),
              distributions=TORCH, supported=TORCH_TESTED, needs_env="MPCOMPAT_HANG_DUMP",
              impl=IMPL + "torch_hang_dump",
              summary="with MPCOMPAT_HANG_DUMP=SECONDS, a DataLoader batch or a spawn join "
                      "waited for too long dumps the stacks of this process and its workers"),
)


# The manager

(WAITING, APPLIED, NOT_NEEDED, SKIPPED, DISABLED, FAILED, MISSED, INACTIVE) = (
    "waiting for import", "applied", "not needed", "skipped", "disabled", "failed",
    "not applied", "inactive")


def _impl_module(spec):
    """The name of the module that holds the patch's code."""
    return spec.impl.partition(":")[0]


def _implementation(spec):
    """The patch's code, imported if need be: what has its ``apply`` and ``revert``."""
    return implementation(spec.impl)


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
_pending = {}  # target name -> the PatchStates applied on it whose module waits for first use
_used = []  # True once a first use came: later targets apply as they are imported
_stubs = Patcher()  # the first-use stubs in place
_locks = {}


def states(read_versions=True, hook=None):
    """The PatchState of every declared patch, in table order (its library's version read,
    unless ``read_versions`` is false; ``hook``: activation's finder, to say what passed it)."""
    result = [_states.get(spec.name) or PatchState(spec) for spec in PATCHES]
    for st in result:
        missed = [t for t in st.spec.targets if t in sys.modules and t not in _seen]
        if st.state != WAITING:
            pass
        elif st.spec.env_off():
            st.state, st.reason = NOT_NEEDED, st.spec.env_off()
        elif st.spec.needed and not st.spec.distributions and _judge(st)[0] == NOT_NEEDED:
            st.state, st.reason = _judge(st)  # a standard-library patch for a newer Python
        elif missed:  # another finder took the import
            st.state, st.reason = MISSED, _bypassed(missed[0], hook)
        if read_versions:
            _read_version(st)
    return result


def parse_names(value, what, known, strict=True):
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


def armed_before():
    """Whether arm() ran in this process (activation then re-arms at once)."""
    return bool(_states)


def _bypassed(target, hook):
    path = list(sys.meta_path)
    ahead = path[:path.index(hook)] if hook in path else None
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
        if _undefer(st, module):
            continue  # only stubs were in place: the patch's module need not load to revert
        try:
            _implementation(st.spec).revert(module)
        except Exception as exc:
            _warn(st, "could not be reverted on %s: %s: %s" % (module.__name__,
                                                                type(exc).__name__, exc))


def apply_imported(armed, imported):
    """Apply the ``armed`` PatchStates to their targets imported already (a target still being
    imported: in a thread of its own, once it is). Never from inside an import: a deadlock."""
    for st in armed:
        for target in st.spec.targets:
            module, finished = imported(target)
            if module is not None and not finished:
                start_new_thread(_when_imported, (st, target, imported))
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
                _implementation(st.spec)
        except Exception:
            pass


def _when_imported(st, name, imported):
    """Apply ``st`` to module ``name`` once the import of it under way has finished."""
    try:
        __import__(name)  # waits for the import under way; a failed one is run again
    except Exception:
        return
    module, finished = imported(name)
    if st.armed and finished and st.applied.get(name) is not module:
        _apply(st, module)


def on_module(module):
    """A target module finished executing: apply the armed patches that target it."""
    _seen.add(module.__name__)
    for st in list(_states.values()):
        if st.armed and module.__name__ in st.spec.targets:
            _apply(st, module)


def adopt(early):
    """Take over the first-use stubs activation put on before this module loaded (``{target:
    (module, [(owner, name, original, stub), ...])}``): the armed patches of those targets wait
    for a first use, as on_module() leaves them. Bookkeeping only, nothing imported: the caller
    holds activation's lock."""
    with process_lock(_locks):
        for target, (_, stubs) in early.items():
            _pending.setdefault(target, [])  # _apply() defers: the stubs are on
            for owner, name, original, stub in stubs:
                _stubs.adopt(owner, name, original, stub, target)
    for module, _ in early.values():
        on_module(module)


def _read_version(st):
    """Read the version of the patch's library (or Python's), once; "" if unknown."""
    if st.version is None:
        if not st.spec.distributions:
            st.distribution, st.version = "Python", python_version()
        else:
            package = st.spec.targets[0].split(".")[0]
            dist, version = version_of(st.spec.distributions, package)
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
    if version and spec.needed and not in_range(version, spec.needed):
        return NOT_NEEDED, "%s %s does not have the bug (needed for %s)" % (
            st.distribution, version, spec.needed)
    if not version or in_range(version, spec.supported):
        return APPLIED, ""  # unknown (a source build): the patch checks what it relies on
    untested = "untested on %s %s; tested %s" % (st.distribution, version, spec.supported)
    if newer_than(version, spec.supported):
        # A newer release never switches a fix off: the patch applies where it finds what it
        # hooks (else its apply() raises Skip), quietly; status() says it is untested.
        return APPLIED, untested
    return SKIPPED, untested + ": it stays off below the tested versions"


def _apply(st, module):
    """Apply ``st`` to ``module`` (or defer it to a first use); never raise."""
    (state, reason), warning = _judge(st), None
    if st.spec.env_off():
        state, reason = NOT_NEEDED, st.spec.env_off()
    elif state == APPLIED:
        st.applied[module.__name__] = module
        entries = st.spec.first_use.get(module.__name__, ())
        if (entries and _impl_module(st.spec) not in sys.modules and not _used
                and not child_starting()) or module.__name__ in _pending:
            reason = "; ".join(filter(None, (reason, _defer(st, module, entries))))
        else:
            state, reason, warning = _run_apply(st, module, reason)
            if state == APPLIED and not st.armed:  # disarmed meanwhile, by another thread
                revert([(st, module)])
                return
    _settle(st, module, state, reason, warning)


def _run_apply(st, module, reason):
    """Import the patch's module and apply it: ``(state, reason, warning)``."""
    implementation = None
    try:
        implementation = _implementation(st.spec)
        implementation.apply(module)
        return APPLIED, reason, None
    except Exception as exc:
        return _declined(st, module, exc, implementation is not None)


def _declined(st, module, exc, loaded):
    """``(state, reason, warning)`` of a patch whose apply() raised ``exc`` (``loaded``: its
    code had loaded: what it did before it raised is reverted)."""
    if isinstance(exc, NotNeeded):
        return NOT_NEEDED, str(exc), None
    if isinstance(exc, Skip):
        return SKIPPED, str(exc), "skipped on %s %s: %s" % (st.distribution, st.version, exc)
    from mpcompat.errors import describe_exception
    cause = describe_exception(exc)
    if loaded:
        revert([(st, module)])
    return FAILED, cause, "failed on %s %s and was skipped: %s" % (
        st.distribution, st.version, cause)


def adopt_applied(records):
    """Take over the patches applied before this module loaded (``mpcompat.patcher.
    apply_standard``: ``(patch name, module, exception or None, whether its code loaded)``
    each), settled as :func:`_run_apply` settles them; a first use has come. The caller holds
    activation's lock, and armed every patch."""
    _used[:] = [True]
    for name, module, exc, loaded in records:
        st = _states[name]
        _seen.add(module.__name__)
        st.applied[module.__name__] = module
        reason = _judge(st)[1]
        state, reason, warning = (APPLIED, reason, None) if exc is None else _declined(
            st, module, exc, loaded)
        _settle(st, module, state, reason, warning)


def _settle(st, module, state, reason, warning):
    """Record the outcome of one application in status(), and warn where it declined."""
    if state == APPLIED:
        st.applications += 1
        _applied(st, reason)
    else:
        st.applied.pop(module.__name__, None)
        if not st.applied:  # one target applied and another declining: keep "applied"
            st.state, st.reason = state, reason
    if warning:  # patches failing for one cause (a file of mpcompat they share) warn once
        _warn(st, warning, key=reason if state == FAILED else None)


def _applied(st, note):
    """Say in status() where ``st`` is applied and what it waits for, with ``note``."""
    waiting = [t for t in st.spec.targets if t not in st.applied]
    st.state, st.reason = APPLIED, "on %s" % ", ".join(sorted(st.applied)) + (
        "; waiting for %s" % ", ".join(waiting) if waiting else "") + (
        " (%s)" % note if note else "")


def _defer(st, module, entries):
    """Put a stub on each of ``entries`` of ``module`` (its first-use attributes, "Pool.__init__"),
    whose first call applies the deferred patches; return what status() adds (nothing where no
    entry is a function or classmethod: then the patch applies now)."""
    spots = first_use_spots(module, entries)
    with process_lock(_locks):
        # Behind another patch's stubs, a patch waits too: one applied now would wrap a stub.
        # (a first use in another thread since _apply() looked: the patch applies now)
        later = (bool(spots) and not _used) or module.__name__ in _pending
        if later:
            _pending.setdefault(module.__name__, [])
            if st not in _pending[module.__name__]:
                _pending[module.__name__].append(st)
            for owner, name, path in spots:
                if stands_for(owner.__dict__[name]) is None:
                    _stubs.replace(owner, name, first_use_stub(owner, name, module.__name__),
                                   module.__name__)
    if not later:
        _implementation(st.spec).apply(module)
        return ""
    if not spots:
        return "its code loads with the other patches of %s, at their first use" % (
            module.__name__)
    return "its code loads at the first call of %s" % " or ".join(
        sorted(path for _, _, path in spots))


# The targets whose functions start or feed worker processes: a Pool's, a Queue's and an
# executor's helper threads call some of them (a task pickled, a worker restarted), and must never
# import (the fork rule). The first stub of any of them, called in the user's thread, applies the
# deferred patches of all of them; the stub of another target applies its own module's.
# (torch.multiprocessing.spawn is one of them: its stub on start_processes is passed by those who
# call the package's name for it, bound before the stub is put on; torch's elastic agent does.)
_WORKER_TARGETS = ("multiprocessing.", "concurrent.futures.", "torch.utils.data.",
                   "torch.multiprocessing.")


def _first_use_group(name):
    return "workers" if name.startswith(_WORKER_TARGETS) else name


def apply_deferred(target=None):
    """Apply the patches deferred to a first use: those of ``target`` (a module name) and of
    the targets it goes with (``_WORKER_TARGETS``), or of every target, in table order, their
    stubs taken out after (another thread calling a stub meanwhile waits for them, even once
    nothing is pending: the last may still be applying)."""
    _used[:] = [True]
    group = None if target is None else _first_use_group(target)
    with process_lock(_locks):
        for name, pending in list(_pending.items()):
            if group is not None and _first_use_group(name) != group:
                continue
            del _pending[name]

            def apply(name=name, pending=pending):
                for st in pending:  # over the stubs (Patcher sees through them), which go after
                    module = st.applied.get(name)
                    if st.armed and module is not None:
                        _apply_deferred(st, module)
            try:
                beneath_wrappers(_stubs.made(name), apply)
            except BaseException:  # cut short (Ctrl-C): all of it again at the next first use
                _pending[name] = pending
                raise
            _stubs.restore(name)


def _apply_deferred(st, module):
    """Apply ``st`` to ``module`` now that a first-use function is called; never raise."""
    state, reason, warning = _run_apply(st, module, _judge(st)[1])
    if state == APPLIED:
        _applied(st, reason)  # counted when it was deferred
    else:
        _settle(st, module, state, reason, warning)


def _undefer(st, module):
    """Take ``st`` off ``module``'s deferred patches; return whether it was one (its stubs go
    with the last one)."""
    with process_lock(_locks):
        pending = _pending.get(module.__name__, ())
        if st not in pending:
            return False
        pending.remove(st)
        if not pending:
            del _pending[module.__name__]
            _stubs.restore(module)
        return True


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
    # said at the user's line that reached the patched library (its first use, its import)
    warn("patch %r %s" % (st.spec.name, message), key,
         library={target.partition(".")[0] for target in st.spec.targets})
