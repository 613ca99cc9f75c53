"""Versions: read cheaply, compared leniently.

``2.13.0+cpu``, ``1.9.0a0+git1234`` and ``1.4.0rc1`` count as their release numbers. Read as a
patch is about to apply, in every process that imports its target: the package's
``__version__``, else the ``<name>-<version>.dist-info`` (``.egg-info``) directory beside it,
and only then ``importlib.metadata`` (tens of milliseconds).
"""
import os
import sys
from itertools import takewhile

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
