"""Diagnostics for objects that cannot be pickled.

``explain(obj)`` reports every part of an object that cannot be pickled, with a Python path to
it and a hint; ``assert_picklable(obj)`` raises ``AssertionError`` with that report. The error
hooks (``pickling_notes`` and ``bootstrap_notes`` in ``mpcompat.patches.mp_children``) add the same report
to errors raised while multiprocessing starts a process or sends a task.
"""
from mpcompat.diagnose.walker import Explanation, Problem, assert_picklable, explain

__all__ = ["explain", "assert_picklable", "Explanation", "Problem"]
