"""Exception and warning types raised by mpcompat."""


class MpcompatWarning(UserWarning):
    """A patch or reducer of mpcompat was skipped or could not do its job."""


class PatchUnavailable(RuntimeError):
    """A patch that was asked for explicitly cannot apply (the message says why)."""
