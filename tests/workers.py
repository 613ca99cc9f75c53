"""Functions that tests send to child processes (they must be importable by name there).

Add functions here rather than in test modules: a spawn child can import ``workers`` because
``tests/`` is on the sys.path it inherits.
"""


def echo(obj):
    """Return ``obj`` as received, so the parent sees the full round trip."""
    return obj


def describe(obj):
    """Return ``(type name, list(obj))`` of a view as the child received it."""
    return type(obj).__name__, list(obj)


def mpcompat_active():
    """Whether mpcompat is active in the child (it is imported by unpickling a view)."""
    import sys
    mod = sys.modules.get("mpcompat")
    return mod is not None and mod.is_active()
