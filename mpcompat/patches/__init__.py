"""The patches: the one table that declares every patch mpcompat can apply, and one module
per patch (its row's ``impl``), imported only when its target module is.

A patch module provides ``apply(module)`` and ``revert(module)``, called once per execution of a
target module's code (see ``mpcompat.patching``); ``apply`` may raise ``Skip`` (with a warning)
or ``NotNeeded`` (silently) to decline.
"""
import os


class PatchSpec(object):
    """One declared patch, immutable (a plain record: a namedtuple costs start-up time).

    name: the name users see in status() and MPCOMPAT_DISABLED_PATCHES.
    targets: module names; the patch applies to each when it finishes importing.
    distributions: whose version is checked, first found wins; empty for a standard-library
        target, checked against Python's version.
    supported: the tested versions, both ends, e.g. ">=1.9,<2.14" (``2.13.0+cpu`` is 2.13.0).
        Outside it a needed patch stays off, with one warning per process tree.
    impl: the module that provides apply(module) and revert(module).
    summary: one line for status().
    needed: the versions that have the bug ("" for all); elsewhere "not needed", silently.
    needs_env: an environment variable that turns the patch on (``MPCOMPAT_HANG_DUMP``);
        while it is unset the patch is "not needed" and its module is not even imported.
    """

    __slots__ = ("name", "targets", "distributions", "supported", "impl", "summary", "needed",
                 "needs_env")

    def __init__(self, name, targets, distributions, supported, impl, summary, needed="",
                 needs_env=""):
        for field, value in zip(self.__slots__, (name, tuple(targets), tuple(distributions),
                                                 supported, impl, summary, needed, needs_env)):
            object.__setattr__(self, field, value)

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


class Skip(Exception):
    """Raised by a patch that declines to apply (the message says why): "skipped", with one
    warning per process tree."""


class NotNeeded(Skip):
    """Raised by a patch with nothing to do here: "not needed", silently."""


TORCH, TORCH_TESTED, PYTHON_TESTED = ("torch",), ">=1.9,<2.14", ">=3.8,<3.16"
# The opencv-python wheels, in the order they are looked for.
OPENCV = ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
          "opencv-contrib-python")
IMPL = "mpcompat.patches."

# Rows give the fields in the order above, needed and needs_env by name.
PATCHES = (
    PatchSpec("torch.boolean_dispatch", ("torch._jit_internal",), TORCH, TORCH_TESTED,
              IMPL + "torch_boolean_dispatch",
              "functions made by boolean_dispatch (F.max_pool2d, ...) pickle by reference"),
    PatchSpec("torch.safe_globals", ("torch.serialization",), TORCH, ">=2.13,<2.14",
              IMPL + "torch_safe_globals",
              "torch.load(weights_only=True) accepts mpcompat's view rebuild functions",
              needed=">=2.4"),
    PatchSpec("torch.generator", ("torch",), TORCH, TORCH_TESTED, IMPL + "torch_generator",
              "a torch.Generator reaches spawn children with its state"),
    PatchSpec("torch.dataloader_workers",
              ("torch.utils.data._utils.worker", "torch.utils.data.dataloader"), TORCH,
              TORCH_TESTED, IMPL + "torch_dataloader_workers",
              "DataLoader workers: an unpicklable batch, or a worker that dies starting up, "
              "raises in the parent with its cause"),
    PatchSpec("torch.spawn_errors", ("torch.multiprocessing.spawn",), TORCH, TORCH_TESTED,
              IMPL + "torch_spawn_errors",
              "torch.multiprocessing.spawn: a child that dies starting up is named with its cause"),
    PatchSpec("nuscenes.detection_config", ("nuscenes.eval.detection.data_classes",),
              ("nuscenes-devkit",), ">=1.1,<1.3", IMPL + "nuscenes_detection_config",
              "DetectionConfig.class_names is a list in class_range order"),
    PatchSpec("nuscenes.tracking_config", ("nuscenes.eval.tracking.data_classes",),
              ("nuscenes-devkit",), ">=1.1,<1.3", IMPL + "nuscenes_tracking_config",
              "an unpickled TrackingConfig restores the module state its __init__ sets"),
    PatchSpec("opencv.worker_threads", ("cv2",), OPENCV, ">=4.5,<5.1",
              IMPL + "opencv_worker_threads",
              "OpenCV runs single-threaded, OpenCL off, in DataLoader workers and forked children"),
    PatchSpec("multiprocessing.pickling_notes", ("multiprocessing.reduction",), (),
              PYTHON_TESTED, IMPL + "mp_pickling_notes",
              "a pickling error while starting a process or sending a task or result says what, "
              "where and why"),
    PatchSpec("multiprocessing.bootstrap_notes", ("multiprocessing.spawn",), (), PYTHON_TESTED,
              IMPL + "mp_bootstrap_notes",
              "a child that fails to start says why (main guard, objects defined under it) and "
              "its parent learns it"),
    PatchSpec("multiprocessing.failure_records",
              ("multiprocessing.process", "multiprocessing.spawn", "multiprocessing.forkserver"),
              (), PYTHON_TESTED, IMPL + "mp_failure_records",
              "a child's start-up error reaches its parent (a socket the parent owns); a plain "
              "Process's is named once in the parent"),
    PatchSpec("multiprocessing.pool_workers", ("multiprocessing.pool",), (), PYTHON_TESTED,
              IMPL + "mp_pool_workers",
              "a Pool whose workers die starting up fails fast with their error; unpicklable "
              "results are named"),
    PatchSpec("concurrent_futures.process_workers", ("concurrent.futures.process",), (),
              PYTHON_TESTED, IMPL + "futures_process_workers",
              "a ProcessPoolExecutor whose worker dies names the worker, its exit code or signal, "
              "and its recorded error"),
    PatchSpec("concurrent_futures.interpreter_workers", ("concurrent.futures.interpreter",), (),
              PYTHON_TESTED, IMPL + "futures_interpreter_workers",
              "an InterpreterPoolExecutor task whose arguments or result cannot be sent between "
              "interpreters names what and why", needed=">=3.14"),
    PatchSpec("multiprocessing.stuck_waits", ("multiprocessing.pool", "multiprocessing.process"),
              (), PYTHON_TESTED, IMPL + "mp_stuck_waits",
              "with MPCOMPAT_HANG_DUMP=SECONDS, a Pool/ThreadPool result waited for too long "
              "dumps the stacks of this process and its workers", needs_env="MPCOMPAT_HANG_DUMP"),
    PatchSpec("concurrent_futures.stuck_waits", ("concurrent.futures._base",), (), PYTHON_TESTED,
              IMPL + "futures_stuck_waits",
              "with MPCOMPAT_HANG_DUMP=SECONDS, a concurrent.futures future waited for too long "
              "dumps the stacks of this process and its workers", needs_env="MPCOMPAT_HANG_DUMP"),
    PatchSpec("torch.stuck_waits", ("torch.utils.data.dataloader", "torch.multiprocessing.spawn"),
              TORCH, TORCH_TESTED, IMPL + "torch_stuck_waits",
              "with MPCOMPAT_HANG_DUMP=SECONDS, a DataLoader batch or a spawn join waited for too "
              "long dumps the stacks of this process and its workers",
              needs_env="MPCOMPAT_HANG_DUMP"),
)
