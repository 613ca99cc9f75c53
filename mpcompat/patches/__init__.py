"""The patches: one module per patch (``apply(module)``, ``revert(module)``), named by its row
of the table in ``mpcompat.patching``, imported only when its target module is; the four that
every child start loads share ``mp_children`` (an object per patch)."""
