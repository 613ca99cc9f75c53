"""Child-side functions and models for tests/torch (importable by name in spawn children).

Kept apart from ``workers.py`` because importing this module imports torch. TorchScript needs
the source of what it compiles, so the scripted model lives in a file too.
"""
import importlib

import torch
import torch.nn.functional as F


def identity_in_child(entries):
    """For each ``(module name, name, function)`` received: is it the object the module binds?"""
    return [getattr(importlib.import_module(module), name, None) is func
            for module, name, func in entries]


def returned_with_mpcompat(funcs):
    """Send ``funcs`` back from a child where mpcompat is active (as auto-activation makes it).

    Unpickling a function by reference imports torch, not mpcompat: without this import the
    child's copies keep torch's qualname and cannot be pickled back.
    """
    import mpcompat  # noqa: F401
    return funcs


def draw(generator, n):
    """Return ``n`` numbers drawn from ``generator`` as received, and its initial seed."""
    return torch.rand(n, generator=generator).tolist(), generator.initial_seed()


def put_draws(generator, n, queue):
    """``Process`` target: put what :func:`draw` returns on ``queue``."""
    queue.put(draw(generator, n))


class ScriptablePooling(torch.nn.Module):
    """Calls boolean_dispatch functions with their flag both ways, for TorchScript and FX."""

    def forward(self, x):
        plain = F.max_pool2d(x, 2)
        pooled, indices = F.max_pool2d(x, 2, return_indices=True)
        adaptive, adaptive_indices = F.adaptive_max_pool2d(x, 1, True)
        values = F.max_pool1d(x.flatten(1), 2)
        uniq, inverse = torch.unique(x.flatten().round(), return_inverse=True)
        runs, counts = torch.unique_consecutive(x.flatten().round(), return_counts=True)
        return plain, pooled, indices, adaptive, adaptive_indices, values, uniq, inverse, runs, counts

