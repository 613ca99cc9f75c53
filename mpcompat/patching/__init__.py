"""The patch machinery: ``importhook`` calls back as a watched module finishes importing,
``spec`` declares a patch (``PatchSpec``) and how it declines (``Skip``, ``NotNeeded``),
``manager`` applies the patches of ``mpcompat.patches.table``, ``patcher`` is the one way a patch
changes anything, ``versions`` reads and compares versions."""
