"""The patch machinery: a declared table, lazy application on import, reversible patches.

``table`` declares every patch; ``versions`` reads installed versions leniently; ``importhook``
calls back when a target module finishes importing; ``manager`` applies, skips and reverts
patches and keeps the state that ``mpcompat.status()`` reports.
"""
