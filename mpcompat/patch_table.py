"""The one table that declares every patch mpcompat can apply.

Reading this table imports nothing: implementations are named by module path and imported
only when their target module is imported. Each implementation module provides
``apply(module)`` and ``revert(module)``, called once per target module (see
``mpcompat/patches/__init__.py``), and may raise ``mpcompat.patch_table.Skip`` to decline.
"""


class PatchSpec(object):
    """One declared patch (a plain record: a namedtuple costs start-up time).

    name: the name users see in status() and MPCOMPAT_DISABLED_PATCHES.
    targets: module names; the patch applies to each when it finishes importing.
    distributions: distribution names whose installed version is checked, first found wins;
        empty for a standard-library target (then ``supported`` is checked against Python's).
    supported: version range of that distribution, e.g. ">=1.8,<2.14" (read leniently).
    default: whether activation applies it without being asked.
    impl: the module that provides apply(module) and revert(module).
    summary: one line for status().
    """

    __slots__ = ("name", "targets", "distributions", "supported", "default", "impl", "summary")

    def __init__(self, name, targets, distributions, supported, default, impl, summary):
        self.name, self.targets, self.distributions = name, targets, distributions
        self.supported, self.default, self.impl, self.summary = supported, default, impl, summary

    def __repr__(self):
        return "PatchSpec(%r)" % self.name


class Skip(Exception):
    """Raised by a patch implementation that declines to apply (the message says why)."""


PATCHES = (
    PatchSpec(
        name="torch.boolean_dispatch",
        targets=("torch.nn.functional", "torch.functional"),
        distributions=("torch",),
        supported=">=1.8,<2.14",
        default=True,
        impl="mpcompat.patches.torch_boolean_dispatch",
        summary="functions made by boolean_dispatch (F.max_pool2d, ...) pickle by reference",
    ),
    PatchSpec(
        name="torch.safe_globals",
        targets=("torch.serialization",),
        distributions=("torch",),
        supported=">=2.4,<2.14",
        default=True,
        impl="mpcompat.patches.torch_safe_globals",
        summary="torch.load(weights_only=True) accepts mpcompat's view rebuild functions",
    ),
    PatchSpec(
        name="torch.generator",
        targets=("torch",),
        distributions=("torch",),
        supported=">=1.8,<2.14",
        default=True,
        impl="mpcompat.patches.torch_generator",
        summary="a torch.Generator reaches spawn children with its state",
    ),
    PatchSpec(
        name="nuscenes.detection_config",
        targets=("nuscenes.eval.detection.data_classes",),
        distributions=("nuscenes-devkit",),
        supported=">=1.0,<1.3",
        default=True,
        impl="mpcompat.patches.nuscenes_detection_config",
        summary="DetectionConfig.class_names is a list in class_range order",
    ),
    PatchSpec(
        name="nuscenes.tracking_config",
        targets=("nuscenes.eval.tracking.data_classes",),
        distributions=("nuscenes-devkit",),
        supported=">=1.0,<1.3",
        default=True,
        impl="mpcompat.patches.nuscenes_tracking_config",
        summary="an unpickled TrackingConfig restores the module state its __init__ sets",
    ),
    PatchSpec(
        name="multiprocessing.pickling_notes",
        targets=("multiprocessing.reduction",),
        distributions=(),
        supported=">=3.8,<3.14",
        default=True,
        impl="mpcompat.patches.mp_pickling_notes",
        summary="a pickling error while starting a process or sending a task says what, "
                "where and why",
    ),
    PatchSpec(
        name="multiprocessing.bootstrap_notes",
        targets=("multiprocessing.spawn",),
        distributions=(),
        supported=">=3.8,<3.14",
        default=True,
        impl="mpcompat.patches.mp_bootstrap_notes",
        summary="the 'bootstrapping phase' error names the main-module line to guard",
    ),
)

BY_NAME = {spec.name: spec for spec in PATCHES}
