"""``mpcompat.status()`` and ``mpcompat status``: what is active in this process, how it got
there, and why."""
import sys

from mpcompat import activation


class PatchStatus(object):
    """One row of the patch table as it stands in this process."""

    __slots__ = ("name", "state", "reason", "distribution", "version", "supported", "needed",
                 "targets", "summary", "applications")

    def __init__(self, st):
        for field in self.__slots__:  # what happened to the patch, else what its row declares
            setattr(self, field, getattr(st if field in type(st).__slots__ else st.spec, field))

    def __repr__(self):
        return "PatchStatus(%r, %r)" % (self.name, self.state)


class Status(object):
    """The report returned by :func:`mpcompat.status`; ``str()`` gives a readable summary.

    Attributes: ``active`` (bool); ``how`` (how mpcompat got active or why it is off, e.g.
    "activated at start-up by mpcompat.pth"); ``autostart`` ("on", "off" or "none": whether
    new Python processes of this environment activate it) and ``autostart_line`` (that, in
    full); ``reducers`` (``{type: reducer}``, built-in and user ones); ``builtin`` (the types
    whose built-in reducer is in place); ``conflicts``; ``patches`` (a list of PatchStatus).
    """

    def __init__(self):
        from mpcompat import autostart
        from mpcompat import reducers
        self.__dict__.update(activation.state())  # active, how, conflicts
        self.autostart, self.autostart_line = autostart.environment()
        self.reducers = dict(reducers.registered())
        builtins = activation.builtin_reducers()
        self.builtin = {cls for cls, red in self.reducers.items() if builtins.get(cls) is red}
        self.patches = [PatchStatus(st) for st in activation.ensure_armed().states(hook=activation.hook)]

    reason = property(lambda self: self.how, doc="Same as ``how`` (the name older code used).")

    def headline(self):
        """The first line: active or not, and how, consistent with auto-activation."""
        if not self.active:
            where = "inactive in this process"
        elif self.autostart == "on" or self.how.startswith("activated at start-up"):
            where = "active in this process"
        else:  # new processes of this environment will not have it
            where = "active in this process only"
        return "mpcompat %s: %s, %s" % (sys.modules["mpcompat"].__version__, where, self.how)

    def __str__(self):
        lines = [self.headline(), "auto-activation at interpreter start: %s" % self.autostart_line,
                 "", "reducers:"]
        if not self.reducers:
            lines.append("  (none%s)" % ("" if self.active else ": mpcompat is off"))
        for cls, red in sorted(self.reducers.items(), key=lambda kv: _qualname(kv[0])):
            origin = "built-in" if cls in self.builtin else "user"
            lines.append("  %-28s %-8s %s" % (_qualname(cls), origin, _qualname(red)))
        for name in self.conflicts:
            lines.append("  %-28s left to the reducer another package registered" % name)
        lines += ["", "patches:"]
        width = max([len(p.name) for p in self.patches] + [10])
        for p in self.patches:
            version = ("%s %s" % (p.distribution, p.version) if p.version
                       else "version unknown" if p.version == "" else "not imported")
            lines.append("  %-*s  %-18s %s" % (width, p.name, p.state, version))
            if p.reason:
                lines.append("  %-*s  %s" % (width, "", p.reason))
        return "\n".join(lines)

    def __repr__(self):
        return "<mpcompat.Status active=%r reducers=%d patches=%s>" % (
            self.active, len(self.reducers), {p.name: p.state for p in self.patches})


def _qualname(obj):
    return "%s.%s" % (getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", repr(obj)))
