"""8 threads start this process's first children at once (fork): ``python first_starts.py``.
Prints one JSON line: per child, whether it was started with its crash file named and its pid
told to the failure channel (what lets its failure be explained), then the exit codes."""
import json
import multiprocessing
import os
import sys
import threading

import mpcompat  # noqa: F401  (active where only the path names it; installed, it is already)


def main():
    from mpcompat.child_failures import channel
    from mpcompat.patches import mp_children
    sys.setswitchinterval(1e-6)  # the threads switch as often as they can
    context = multiprocessing.get_context("fork")
    started = []

    def start():
        process = context.Process(target=os._exit, args=(3,))
        process.start()
        started.append(process)
    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    known = [mp_children.CRASH_KEY in p._config and p.pid in channel._channel.started
             for p in started]
    for process in started:
        process.join(60)
    print(json.dumps([known, [p.exitcode for p in started]]))


if __name__ == "__main__":
    main()
