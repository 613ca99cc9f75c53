"""Tiny patch implementations and target modules for the patch-machinery tests.

The tests add ``PatchSpec`` entries to mpcompat's own table that point at these modules; the
targets are fresh modules the tests import, reload and drop from ``sys.modules`` at will.
"""
