"""The patches: one module per patch (``apply(module)``, ``revert(module)``), named by its row
of the table in ``mpcompat.patching``, imported only when its target module is."""
