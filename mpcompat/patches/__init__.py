"""The patches: the one table that declares every patch mpcompat can apply, and one module
per patch (named by its row's ``impl``).

Reading this table imports nothing: implementations are named by module path and imported
only when their target module is imported. Each implementation module provides
``apply(module)`` and ``revert(module)``, called once per execution of a target module's code
(see ``mpcompat.patching``), and may raise ``Skip`` to decline (with a warning) or
``NotNeeded`` (silently).
"""


class PatchSpec(object):
    """One declared patch, immutable (a plain record: a namedtuple costs start-up time).

    name: the name users see in status() and MPCOMPAT_DISABLED_PATCHES.
    targets: module names; the patch applies to each when it finishes importing.
    distributions: distribution names whose version is checked, first found wins; empty for a
        standard-library target (then the ranges are checked against Python's version). The
        version is read from the target's top-level package (``torch.__version__``) where it
        has one, from the installed metadata otherwise.
    supported: the versions the patch is tested with, both ends, e.g. ">=1.9,<2.14" (read
        leniently: ``2.13.0+cpu`` is 2.13.0). A version where the patch is needed but that lies
        outside this range leaves the patch off, with one warning per process tree.
    needed: the versions that have the bug ("" for all): elsewhere the patch is "not needed",
        silently.
    needs_env: an environment variable that turns the patch on (e.g. ``MPCOMPAT_HANG_DUMP``);
        while it is unset the patch is "not needed" and its module is not even imported.
    impl: the module that provides apply(module) and revert(module).
    summary: one line for status().
    """

    __slots__ = ("name", "targets", "distributions", "supported", "needed", "impl", "summary",
                 "needs_env")

    def __init__(self, name, targets, distributions, supported, impl, summary, needed="",
                 needs_env=""):
        for field, value in zip(self.__slots__, (name, tuple(targets), tuple(distributions),
                                                 supported, needed, impl, summary, needs_env)):
            object.__setattr__(self, field, value)

    def __setattr__(self, name, value):
        raise AttributeError("a PatchSpec is immutable: a test uses a table of its own")

    def __repr__(self):
        return "PatchSpec(%r)" % self.name


class Skip(Exception):
    """Raised by a patch implementation that declines to apply (the message says why): the
    patch is "skipped", with one warning per process tree."""


class NotNeeded(Skip):
    """Raised by a patch implementation with nothing to do here (a feature left off, a
    library that already behaves): the patch is "not needed", silently."""


# The opencv-python wheels, in the order they are looked for.
OPENCV = ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
          "opencv-contrib-python")

PATCHES = (
    PatchSpec(
        name="torch.boolean_dispatch",
        targets=("torch._jit_internal",),
        distributions=("torch",),
        supported=">=1.9,<2.14",
        impl="mpcompat.patches.torch_boolean_dispatch",
        summary="functions made by boolean_dispatch (F.max_pool2d, ...) pickle by reference",
    ),
    PatchSpec(
        name="torch.safe_globals",
        targets=("torch.serialization",),
        distributions=("torch",),
        supported=">=2.13,<2.14",
        needed=">=2.4",
        impl="mpcompat.patches.torch_safe_globals",
        summary="torch.load(weights_only=True) accepts mpcompat's view rebuild functions",
    ),
    PatchSpec(
        name="torch.generator",
        targets=("torch",),
        distributions=("torch",),
        supported=">=1.9,<2.14",
        impl="mpcompat.patches.torch_generator",
        summary="a torch.Generator reaches spawn children with its state",
    ),
    PatchSpec(
        name="torch.dataloader_workers",
        targets=("torch.utils.data._utils.worker", "torch.utils.data.dataloader"),
        distributions=("torch",),
        supported=">=1.9,<2.14",
        impl="mpcompat.patches.torch_dataloader_workers",
        summary="DataLoader workers: an unpicklable batch, or a worker that dies starting up, "
                "raises in the parent with its cause",
    ),
    PatchSpec(
        name="torch.spawn_errors",
        targets=("torch.multiprocessing.spawn",),
        distributions=("torch",),
        supported=">=1.9,<2.14",
        impl="mpcompat.patches.torch_spawn_errors",
        summary="torch.multiprocessing.spawn: a child that dies starting up is named with its "
                "cause",
    ),
    PatchSpec(
        name="nuscenes.detection_config",
        targets=("nuscenes.eval.detection.data_classes",),
        distributions=("nuscenes-devkit",),
        supported=">=1.1,<1.3",
        impl="mpcompat.patches.nuscenes_detection_config",
        summary="DetectionConfig.class_names is a list in class_range order",
    ),
    PatchSpec(
        name="nuscenes.tracking_config",
        targets=("nuscenes.eval.tracking.data_classes",),
        distributions=("nuscenes-devkit",),
        supported=">=1.1,<1.3",
        impl="mpcompat.patches.nuscenes_tracking_config",
        summary="an unpickled TrackingConfig restores the module state its __init__ sets",
    ),
    PatchSpec(
        name="opencv.worker_threads",
        targets=("cv2",),
        distributions=OPENCV,
        supported=">=4.5,<5.1",
        impl="mpcompat.patches.opencv_worker_threads",
        summary="OpenCV runs single-threaded, OpenCL off, in DataLoader workers and forked "
                "children",
    ),
    PatchSpec(
        name="multiprocessing.pickling_notes",
        targets=("multiprocessing.reduction",),
        distributions=(),
        supported=">=3.8,<3.16",
        impl="mpcompat.patches.mp_pickling_notes",
        summary="a pickling error while starting a process or sending a task or result says "
                "what, where and why",
    ),
    PatchSpec(
        name="multiprocessing.bootstrap_notes",
        targets=("multiprocessing.spawn",),
        distributions=(),
        supported=">=3.8,<3.16",
        impl="mpcompat.patches.mp_bootstrap_notes",
        summary="a child that fails to start says why (main guard, objects defined under it) "
                "and its parent learns it",
    ),
    PatchSpec(
        name="multiprocessing.failure_records",
        targets=("multiprocessing.process", "multiprocessing.spawn", "multiprocessing.forkserver"),
        distributions=(),
        supported=">=3.8,<3.16",
        impl="mpcompat.patches.mp_failure_records",
        summary="a child's start-up error reaches its parent (a socket the parent owns); a "
                "plain Process's is named once in the parent",
    ),
    PatchSpec(
        name="multiprocessing.pool_workers",
        targets=("multiprocessing.pool",),
        distributions=(),
        supported=">=3.8,<3.16",
        impl="mpcompat.patches.mp_pool_workers",
        summary="a Pool whose workers die starting up fails fast with their error; unpicklable "
                "results are named",
    ),
    PatchSpec(
        name="concurrent_futures.process_workers",
        targets=("concurrent.futures.process",),
        distributions=(),
        supported=">=3.8,<3.16",
        impl="mpcompat.patches.futures_process_workers",
        summary="a ProcessPoolExecutor whose worker dies names the worker, its exit code or "
                "signal, and its recorded error",
    ),
    PatchSpec(
        name="concurrent_futures.interpreter_workers",
        targets=("concurrent.futures.interpreter",),
        distributions=(),
        supported=">=3.8,<3.16",
        needed=">=3.14",
        impl="mpcompat.patches.futures_interpreter_workers",
        summary="an InterpreterPoolExecutor task whose arguments or result cannot be sent "
                "between interpreters names what and why",
    ),
    PatchSpec(
        name="multiprocessing.stuck_waits",
        targets=("multiprocessing.pool", "multiprocessing.process"),
        distributions=(),
        supported=">=3.8,<3.16",
        needs_env="MPCOMPAT_HANG_DUMP",
        impl="mpcompat.patches.mp_stuck_waits",
        summary="with MPCOMPAT_HANG_DUMP=SECONDS, a Pool/ThreadPool result waited for too long "
                "dumps the stacks of this process and its workers",
    ),
    PatchSpec(
        name="concurrent_futures.stuck_waits",
        targets=("concurrent.futures._base",),
        distributions=(),
        supported=">=3.8,<3.16",
        needs_env="MPCOMPAT_HANG_DUMP",
        impl="mpcompat.patches.futures_stuck_waits",
        summary="with MPCOMPAT_HANG_DUMP=SECONDS, a concurrent.futures future waited for too "
                "long dumps the stacks of this process and its workers",
    ),
    PatchSpec(
        name="torch.stuck_waits",
        targets=("torch.utils.data.dataloader", "torch.multiprocessing.spawn"),
        distributions=("torch",),
        supported=">=1.9,<2.14",
        needs_env="MPCOMPAT_HANG_DUMP",
        impl="mpcompat.patches.torch_stuck_waits",
        summary="with MPCOMPAT_HANG_DUMP=SECONDS, a DataLoader batch or a spawn join waited for "
                "too long dumps the stacks of this process and its workers",
    ),
)
