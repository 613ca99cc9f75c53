"""A broken patch: ``apply`` raises, as a patch meeting an unexpected library would."""


def apply(module):
    """Fail."""
    raise RuntimeError("boom: %s changed shape" % module.__name__)


def revert(module):
    """Nothing to undo."""
