"""Pickling helpers beyond the reducers (``mpcompat.reducers``): ``per_process`` holds the
per-process handles."""
