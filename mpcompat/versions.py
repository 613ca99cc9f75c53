"""Lenient version reading: ``2.13.0+cpu``, ``1.9.0a0+git1234`` and ``1.4.0rc1`` all count.

Only the leading release numbers matter; pre-release, local and dev parts are ignored, so a
nightly or a distro build of a supported release is treated as that release.
"""
import re

_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")
_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9.]*)\s*$")


def parse(version):
    """Return the release numbers of ``version`` as a tuple of ints, or None if it has none."""
    match = _RELEASE.match(version or "")
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


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
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError("bad version clause %r in %r" % (clause, spec))
        op, bound = match.group(1), tuple(int(p) for p in match.group(2).split("."))
        have, want = _pad(release, bound)
        ok = {">=": have >= want, "<=": have <= want, "==": have == want,
              "!=": have != want, ">": have > want, "<": have < want}[op]
        if not ok:
            return False
    return True


def installed_version(distributions):
    """Return ``(distribution, version)`` for the first of ``distributions`` installed.

    Returns ``(None, None)`` when none is. Imports importlib.metadata, so call it only when a
    patch is about to apply, never at start-up.
    """
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8 has no importlib.metadata: not supported anyway
        return None, None
    for dist in distributions:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None
