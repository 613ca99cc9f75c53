"""Hang dumps: with ``MPCOMPAT_HANG_DUMP=SECONDS``, a wait that lasts SECONDS without progress
shows where it is stuck, on stderr; nothing is killed. Off by default: long waits are often
legitimate.

- :mod:`mpcompat.hang_dump.watchdog`: reads and parses ``MPCOMPAT_HANG_DUMP`` (for every hang-dump
  patch); watches the main thread's waits (a Pool/ThreadPool result, a ``concurrent.futures``
  future, a DataLoader batch, a ``torch.multiprocessing.spawn`` join) and dumps the stacks of
  this process's threads and of the wait's worker processes, which it asks for theirs
  (``faulthandler`` on SIGURG).
- :mod:`mpcompat.hang_dump.stacks`: stacks as a person reads them in a dump (parsed from
  ``faulthandler``'s text, condensed, idle ones on one line).
- :mod:`mpcompat.hang_dump.collectives`: a ``torch.distributed`` collective that lasts SECONDS
  makes every rank of the job say, through the c10d store, where it is; the dump names the ranks
  that are not in it.

The patches that hook them in are ``mpcompat.patches.mp_hang_dump``, ``futures_hang_dump``,
``torch_hang_dump`` and ``torch_collective_hang_dump`` (patches.md, "Hang dumps").
"""
