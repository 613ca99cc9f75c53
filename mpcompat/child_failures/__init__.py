"""Child failures: why a child process died, told where the user reads it (the parent).

- ``channel``: a child that fails while starting sends its error to its parent, which takes
  the record when it notices the death;
- ``spawn_child``: in a spawn or forkserver child, the step that failed and the record sent;
- ``exits``: the measured end of a dead child (exit code or signal), in words, with the
  evidence of ``memory_evidence`` (OOM kill counters, peak memory), ``crash_stacks`` (the
  Python stack at a native crash) and ``shared_memory`` (/dev/shm at a SIGBUS).

The patches ``multiprocessing.failure_records``, ``multiprocessing.bootstrap_notes`` and
``multiprocessing.exit_evidence`` are the adapters that call into this package.
"""
