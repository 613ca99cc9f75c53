"""Patch implementations, one module per entry of ``mpcompat.patching.table.PATCHES``.

Each module provides:
- ``apply(module)``: patch ``module`` (a target that just finished importing, or was already
  imported at activation); idempotent, and safe after ``importlib.reload`` re-created the
  module's objects. Raise ``mpcompat.patching.table.Skip`` to decline with a reason.
- ``revert(module)``: undo ``apply`` on ``module``, restoring the original objects (same
  identity); a no-op if nothing is applied; never clobber an object someone else put there.
"""
