"""Worker guards: the Pool's worker channels, worker start hooks, the user's frames."""
