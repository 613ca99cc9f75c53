"""A well-behaved patch: ``answer()`` of the target returns 42 instead of 41.

Records every ``apply`` call in ``CALLS`` so tests can count (re-)applications.
"""
import types

CALLS = []
_originals = {}  # module name -> (original function, our wrapper)


def apply(module):
    """Replace ``module.answer`` with a wrapper (idempotent)."""
    CALLS.append(module.__name__)
    current = module.answer
    saved = _originals.get(module.__name__)
    if saved is not None and current is saved[1]:
        return

    def answer():
        return current() + 1
    _originals[module.__name__] = (current, answer)
    module.answer = answer


def revert(module):
    """Put the original ``answer`` back, unless someone replaced our wrapper since."""
    saved = _originals.pop(module.__name__, None)
    if saved is not None and module.answer is saved[1]:
        module.answer = saved[0]


# The same patch as an object in this module: a table row's impl "patchkit.good:AS_OBJECT".
AS_OBJECT = types.SimpleNamespace(apply=apply, revert=revert)
