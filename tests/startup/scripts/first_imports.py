"""Eight threads make the first imports of a fresh interpreter at once, with mpcompat active
from its start-up hook (an installed wheel): ``python first_imports.py MODULE...`` (one thread
per module, started together). Prints one JSON line: the errors the threads raised, what
mpcompat wrote to stderr is left to the caller, and every patch whose targets were imported
that did not end applied or not needed."""
import json
import sys
import threading
import traceback

sys.setswitchinterval(1e-6)  # threads switch as often as they can: the worst interleavings
modules = sys.argv[1:]
errors = []
barrier = threading.Barrier(len(modules))


def first_import(name):
    barrier.wait()
    try:
        __import__(name)
    except BaseException as exc:
        errors.append("%s: %s" % (name, "".join(
            traceback.format_exception_only(type(exc), exc)).strip()))


threads = [threading.Thread(target=first_import, args=(name,)) for name in modules]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
import mpcompat  # noqa: E402  (active already: the start-up hook's trigger)
lost = ["%s: %s: %s" % (row.name, row.state, row.reason) for row in mpcompat.status().patches
        if any(t in sys.modules for t in row.targets) and row.state not in ("applied",
                                                                            "not needed")]
print(json.dumps({"errors": errors, "lost": lost, "active": mpcompat.is_active()}))
