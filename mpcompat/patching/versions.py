"""Versions: read cheaply, compared leniently.

``2.13.0+cpu``, ``1.9.0a0+git1234`` and ``1.4.0rc1`` all count as their leading release
numbers: pre-release, local and dev parts are ignored, so a nightly or a distro build of a
supported release is treated as that release.

Reading a version happens when a patch is about to apply, in every process that imports its
target, so it avoids ``importlib.metadata`` (tens of milliseconds): the package's own
``__version__`` first, then the ``<name>-<version>.dist-info`` (or ``.egg-info``) directory
next to the package, and only then the metadata machinery.
"""
import os
import sys

# No regular expressions here: this module loads when the first patch target is imported, in
# processes that may never import ``re`` otherwise (3 ms).
_OPERATORS = (">=", "<=", "==", "!=", ">", "<")
_listings = {}  # directory -> {normalized distribution name: version} of its metadata dirs


def parse(version):
    """Return the release numbers of ``version`` as a tuple of ints, or None if it has none."""
    text = (version or "").strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    end = 0
    while end < len(text) and (text[end] in "0123456789."):
        end += 1
    parts = text[:end].split(".")
    while parts and not parts[-1]:  # "3." is 3
        parts.pop()
    if not parts or not all(parts):
        return None
    return tuple(int(part) for part in parts)


def _pad(a, b):
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def in_range(version, spec):
    """Whether ``version`` (a string) satisfies ``spec`` such as ``">=1.8,<2.14"``.

    An empty ``spec`` accepts every version that has release numbers.
    """
    release = parse(version)
    if release is None:
        return False
    for clause in spec.split(","):
        if not clause.strip():
            continue
        op, bound = _clause(clause, spec)
        have, want = _pad(release, bound)
        ok = {">=": have >= want, "<=": have <= want, "==": have == want,
              "!=": have != want, ">": have > want, "<": have < want}[op]
        if not ok:
            return False
    return True


def newer_than(version, spec):
    """Whether ``version`` fails ``spec`` only by being above its upper bounds (``"3.16.0"``
    for ``">=3.8,<3.16"``)."""
    lower = ",".join(c for c in spec.split(",") if c.strip()[:1] not in ("<", "="))
    return not in_range(version, spec) and in_range(version, lower)


def _clause(clause, spec):
    """``">= 2.4"`` -> ``(">=", (2, 4))``; ValueError for anything else."""
    text = clause.strip()
    for op in _OPERATORS:
        if text.startswith(op):
            bound = text[len(op):].strip()
            parts = bound.split(".")
            if bound and all(part.isdigit() for part in parts):
                return op, tuple(int(part) for part in parts)
            break
    raise ValueError("bad version clause %r in %r" % (clause, spec))


def _normal(name):
    """A distribution name as metadata directories spell it: ``nuscenes-devkit`` ->
    ``nuscenes_devkit`` (lower case, runs of ``-_.`` as one ``_``)."""
    name = name.lower().replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def python_version():
    """This interpreter's version, e.g. ``"3.11.7"``."""
    return "%d.%d.%d" % sys.version_info[:3]


def version_of(distributions, package):
    """Return ``(distribution, version)`` for a library, or ``(None, None)``.

    package: the name of the top-level package (``"torch"``), whose ``__version__`` is used if
    it is imported and has one; otherwise the first of ``distributions`` found installed.
    """
    module = sys.modules.get(package)
    version = getattr(module, "__version__", None)
    if version is not None and parse(str(version)) is not None:
        return _installed_name(distributions, module), str(version)
    return installed_version(distributions, module)


def _installed_name(distributions, module):
    """Which of ``distributions`` provides ``module`` (the first one when that is unclear)."""
    if len(distributions) > 1:
        for dist in distributions:
            if _dist_info_version(dist, module) is not None:
                return dist
    return distributions[0] if distributions else None


def installed_version(distributions, module=None):
    """Return ``(distribution, version)`` for the first of ``distributions`` installed.

    Looks next to ``module`` (an imported package) for its ``.dist-info`` first; falls back to
    ``importlib.metadata``. Returns ``(None, None)`` when none is installed.
    """
    for dist in distributions:
        version = _dist_info_version(dist, module)
        if version is not None:
            return dist, version
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover (Python < 3.8)
        return None, None
    for dist in distributions:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def _dist_info_version(dist, module):
    """The version in the name of ``dist``'s metadata directory beside ``module``, or None."""
    location = getattr(module, "__file__", None)
    if not location:
        return None
    package_dir = os.path.dirname(os.path.abspath(location))
    if os.path.basename(location).startswith("__init__."):
        package_dir = os.path.dirname(package_dir)
    found = _listings.get(package_dir)
    if found is None:
        found = _listings[package_dir] = _metadata_dirs(package_dir)
    version = found.get(_normal(dist))
    return version if version is not None and parse(version) is not None else None


def _metadata_dirs(directory):
    """``{normalized distribution name: version}`` of the metadata directories in
    ``directory`` (``torch-2.13.0+cpu.dist-info``, ``mmcv-1.4.0-py3.8.egg-info``)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return {}
    egg_tag = "-py%d.%d" % sys.version_info[:2]
    found = {}
    for entry in entries:
        if not entry.endswith((".dist-info", ".egg-info")) or "-" not in entry:
            continue
        name, rest = entry.split("-", 1)
        version = rest.rsplit(".", 1)[0]
        if version.endswith(egg_tag):
            version = version[:-len(egg_tag)]
        found.setdefault(_normal(name), version)
    return found
