"""Pickling: the reducer registry, the built-in reducers, per-process handles."""
