"""What declares a patch (``PatchSpec``, a row of ``mpcompat.patches.table``) and how a patch
module declines to apply (``Skip``, ``NotNeeded``).

A patch module provides ``apply(module)`` and ``revert(module)``, called once per execution of a
target module's code (``mpcompat.patching.importhook``); ``apply`` may raise ``Skip`` (with a
warning) or ``NotNeeded`` (silently) to decline.
"""
import os


class PatchSpec(object):
    """One declared patch, immutable (a plain record: a namedtuple costs start-up time).

    name: the name users see in status() and MPCOMPAT_DISABLED_PATCHES.
    targets: module names; the patch applies to each when it finishes importing.
    distributions: whose version is checked, first found wins; empty for a standard-library
        target, checked against Python's version.
    supported: the tested versions, both ends, e.g. ">=1.9,<2.15" (``2.13.0+cpu`` is 2.13.0).
        Above it the patch still applies where it finds what it hooks, "untested" in status();
        below it, it stays off ("skipped", quietly).
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
