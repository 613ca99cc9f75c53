"""``mpcompat.status()``: what is active in this process, and why."""
import sys

from mpcompat import activation, registry
from mpcompat import patch_manager as manager


class PatchStatus(object):
    """One row of the patch table as it stands in this process."""

    __slots__ = ("name", "state", "reason", "distribution", "version", "supported", "targets",
                 "default", "summary")

    def __init__(self, st):
        spec = st.spec
        self.name, self.state, self.reason = spec.name, st.state, st.reason
        self.distribution, self.version = st.distribution, st.version
        self.supported, self.targets = spec.supported, spec.targets
        self.default, self.summary = spec.default, spec.summary

    def __repr__(self):
        return "PatchStatus(%r, %r)" % (self.name, self.state)


class Status(object):
    """The report returned by :func:`status`; ``str()`` gives a readable summary.

    Attributes: ``active`` (bool), ``reason`` (why it is or is not active), ``reducers``
    (``{type: reducer}`` as registered, built-in and user ones), ``builtin`` (the set of types
    whose built-in reducer is in place), ``patches`` (a list of PatchStatus), ``autostart``
    (how mpcompat is activated at interpreter start, a string), ``view_reducers`` (whether the
    built-in view reducers are the C ones or pure Python, and why, a string).
    """

    def __init__(self):
        activation.complete_deferred()
        state = activation.state()
        self.active = state["active"]
        self.reason = state["reason"]
        self.conflicts = list(state["conflicts"])
        self.reducers = dict(registry.registered())
        builtins = activation.builtin_reducers()
        self.builtin = {cls for cls, red in self.reducers.items() if builtins.get(cls) is red}
        self.patches = [PatchStatus(st) for st in manager.states()]
        self.autostart = _autostart()
        from mpcompat import rebuild
        self.view_reducers = rebuild.SPEEDUPS

    def __str__(self):
        lines = ["mpcompat %s: %s (%s)" % (_version(), "active" if self.active else "inactive",
                                           self.reason),
                 "auto-activation: %s" % self.autostart,
                 "view reducers: %s" % self.view_reducers,
                 "", "reducers:"]
        if not self.reducers:
            lines.append("  (none)")
        for cls, red in sorted(self.reducers.items(), key=lambda kv: _qualname(kv[0])):
            origin = "built-in" if cls in self.builtin else "user"
            lines.append("  %-28s %-8s %s" % (_qualname(cls), origin, _qualname(red)))
        for name in self.conflicts:
            lines.append("  %-28s left to the reducer another package registered" % name)
        lines += ["", "patches:"]
        width = max([len(p.name) for p in self.patches] + [10])
        for p in self.patches:
            version = ("%s %s" % (p.distribution, p.version) if p.version
                       else "%s not checked" % "/".join(p.targets[:1]) if p.version is None
                       else "not installed")
            lines.append("  %-*s  %-18s %s" % (width, p.name, p.state, version))
            if p.reason:
                lines.append("  %-*s  %s" % (width, "", p.reason))
        return "\n".join(lines)

    def __repr__(self):
        return "<mpcompat.Status active=%r reducers=%d patches=%s>" % (
            self.active, len(self.reducers), {p.name: p.state for p in self.patches})


def status():
    """Return a :class:`Status` report of reducers, patches and activation in this process."""
    return Status()


def _qualname(obj):
    return "%s.%s" % (getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", repr(obj)))


def _version():
    return sys.modules["mpcompat"].__version__


def _autostart():
    from mpcompat import autostart
    return autostart.describe()
