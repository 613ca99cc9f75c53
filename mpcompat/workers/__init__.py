"""Worker guards: child failure records, stuck-wait dumps."""
