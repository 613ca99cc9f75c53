"""Four threads at once in a fresh interpreter (the installed wheel), none activated before
them: two import standard-library targets whose stubs activation puts on before the patch
manager loads, one calls the first use of one of them as soon as it can, one imports mpcompat
and asks for status() (which loads the manager, adopting the stubs). ``python
early_first_use.py``. Prints one JSON line: the errors the threads raised, whether the first use
ran (CPython's own import race between multiprocessing's modules may stop it, with
MPCOMPAT_DISABLE=1 too), the first-use functions of imported targets still stubbed after it
(none may be: it applied the whole group), and the patches of imported targets not applied."""
import json
import sys
import threading
import traceback

sys.setswitchinterval(1e-6)  # threads switch as often as they can: the worst interleavings
errors = []
used = []
barrier = threading.Barrier(4)


def run(step):
    barrier.wait()
    try:
        step()
    except BaseException as exc:
        errors.append("".join(traceback.format_exception_only(type(exc), exc)).strip())


def first_use():
    from multiprocessing.reduction import ForkingPickler
    assert bytes(ForkingPickler.dumps({1: 2}.keys()))
    used.append(True)


def status():
    import mpcompat
    str(mpcompat.status())


steps = [lambda: __import__("multiprocessing.pool"), first_use,
         lambda: __import__("concurrent.futures.process"), status]
assert "mpcompat" not in sys.modules  # the threads activate it
threads = [threading.Thread(target=run, args=(step,)) for step in steps]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
import mpcompat  # noqa: E402  (active already: the start-up hook's trigger)
from mpcompat.activation import EARLY_FIRST_USES  # noqa: E402
stubbed = []
for target, paths in EARLY_FIRST_USES.items():
    for path in paths if target in sys.modules else ():
        owner = sys.modules[target]
        for part in path.split("."):
            owner = getattr(owner, part)
        if getattr(owner, "mpcompat_first_use", False):
            stubbed.append("%s.%s" % (target, path))
lost = ["%s: %s: %s" % (row.name, row.state, row.reason) for row in mpcompat.status().patches
        if any(t in sys.modules for t in row.targets) and row.state not in ("applied",
                                                                            "not needed")]
print(json.dumps({"errors": errors, "used": bool(used), "stubbed": stubbed if used else [],
                  "lost": lost}))
