"""A patch that declines with ``Skip``."""
from mpcompat.patcher import Skip


def apply(module):
    """Decline."""
    raise Skip("this build of %s needs no patch" % module.__name__)


def revert(module):
    """Nothing to undo."""
