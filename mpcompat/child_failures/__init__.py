"""Child failures: why a child process died, told where the user reads it (the parent).

What every start pays: ``channel`` (a child that fails while starting sends its error to its
parent, which takes the record when it notices the death; the exit evidence: the OOM kill
counters as a child starts, its peak memory as it is reaped); the crash files a child's
faulthandler writes its stack into at a native crash are the ``failure_records`` patch's own.
What a failure loads:
``spawn_child`` (in a spawn or forkserver child, the step that failed and the record sent) and
``exits`` (the end of a dead child in words, from that evidence).

The patches ``multiprocessing.failure_records``, ``multiprocessing.bootstrap_notes`` and
``multiprocessing.exit_evidence`` are the adapters that call into this package.
"""
