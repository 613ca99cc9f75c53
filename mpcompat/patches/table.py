"""The one table that declares every patch mpcompat can apply (``PATCHES``): each row names the
module under ``mpcompat.patches`` that implements it, imported only when its target module is.
"""
from mpcompat.patching.spec import PatchSpec

# torch is tested at 1.9.1, 2.6.0, 2.13.0 and 2.14.1 (.ci/test); a newer release still applies.
TORCH, TORCH_TESTED, PYTHON_TESTED = ("torch",), ">=1.9,<2.15", ">=3.8,<3.16"
# The opencv-python wheels, in the order they are looked for.
OPENCV = ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
          "opencv-contrib-python")
IMPL = "mpcompat.patches."

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
              summary="DataLoader workers: an unpicklable batch, or a worker that dies starting "
                      "up, raises in the parent with its cause"),
    PatchSpec("torch.spawn_errors", targets=("torch.multiprocessing.spawn",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_spawn_errors",
              summary="torch.multiprocessing.spawn: a child that dies starting up is named with "
                      "its cause"),
    PatchSpec("torch.cuda_fork", targets=("torch.cuda",), distributions=TORCH,
              supported=TORCH_TESTED, impl=IMPL + "torch_cuda_fork",
              summary="'Cannot re-initialize CUDA in forked subprocess' names where the parent "
                      "started CUDA, where the child touched it, where it was forked, the fix"),
    PatchSpec("torch.worker_temp_dir", targets=("torch.utils.data.dataloader",),
              distributions=TORCH, supported=TORCH_TESTED, impl=IMPL + "torch_worker_temp_dir",
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
    PatchSpec("torch.collective_hang_dump",
              targets=("torch.distributed.distributed_c10d", "torch.distributed"),
              distributions=TORCH, supported=TORCH_TESTED, needs_env="MPCOMPAT_HANG_DUMP",
              impl=IMPL + "torch_collective_hang_dump",
              summary="with MPCOMPAT_HANG_DUMP=SECONDS, a collective waited in for too long "
                      "names the ranks that are not in it, with their stacks (any node)"),
    PatchSpec("nuscenes.detection_config", targets=("nuscenes.eval.detection.data_classes",),
              distributions=("nuscenes-devkit",), supported=">=1.1,<1.3",
              impl=IMPL + "nuscenes_detection_config",
              summary="DetectionConfig.class_names is a list in class_range order"),
    PatchSpec("nuscenes.tracking_config", targets=("nuscenes.eval.tracking.data_classes",),
              distributions=("nuscenes-devkit",), supported=">=1.1,<1.3",
              impl=IMPL + "nuscenes_tracking_config",
              summary="an unpickled TrackingConfig restores the module state its __init__ sets"),
    PatchSpec("opencv.worker_threads", targets=("cv2",), distributions=OPENCV,
              supported=">=4.5,<5.1", impl=IMPL + "opencv_worker_threads",
              summary="OpenCV runs single-threaded, OpenCL off, in DataLoader workers and "
                      "forked children"),
    PatchSpec("multiprocessing.pickling_notes", targets=("multiprocessing.reduction",),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "mp_pickling_notes",
              summary="a pickling error while starting a process or sending a task or result "
                      "says what, where and why"),
    PatchSpec("multiprocessing.bootstrap_notes", targets=("multiprocessing.spawn",),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "mp_bootstrap_notes",
              summary="a child that fails to start says why (main guard, objects defined under "
                      "it) and its parent learns it"),
    PatchSpec("multiprocessing.failure_records",
              targets=("multiprocessing.process", "multiprocessing.spawn",
                       "multiprocessing.forkserver"),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "mp_failure_records",
              summary="a child's start-up error reaches its parent (a socket the parent owns); "
                      "a plain Process's is named once in the parent"),
    PatchSpec("multiprocessing.exit_evidence",
              targets=("multiprocessing.popen_fork", "multiprocessing.popen_forkserver"),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "mp_exit_evidence",
              summary="a dead child's end is measured: OOM kill counters as it starts, its peak "
                      "memory (os.wait4) as it is reaped"),
    PatchSpec("multiprocessing.pool_workers", targets=("multiprocessing.pool",), distributions=(),
              supported=PYTHON_TESTED, impl=IMPL + "mp_pool_workers",
              summary="a Pool whose workers die starting up fails fast with their error; "
                      "unpicklable results are named"),
    PatchSpec("concurrent_futures.process_workers", targets=("concurrent.futures.process",),
              distributions=(), supported=PYTHON_TESTED, impl=IMPL + "futures_process_workers",
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
