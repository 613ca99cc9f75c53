"""A target whose code waits, half-way through its import, until the test releases it."""
from patchkit import gate

gate.started.set()
gate.release.wait(30)


def answer():
    """The unpatched answer."""
    return 41
