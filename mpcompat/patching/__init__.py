"""The patch machinery: import hook, patch table, patch manager, versions."""
