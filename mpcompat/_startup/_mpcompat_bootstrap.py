"""mpcompat's start-up hook, installed as a top-level module next to ``mpcompat.pth``.

``mpcompat.pth`` (``mpcompat.start`` on Python 3.15+) and the sitecustomize of ``mpcompat run``
call :func:`main`, which does what ``import mpcompat`` does and nothing more:

- with ``MPCOMPAT_DISABLE`` set it returns without importing anything;
- after a failed start-up in an ancestor process (``MPCOMPAT_AUTOSTART_FAILED`` is set) it
  returns without trying again;
- otherwise it imports mpcompat. If that fails it writes one line to stderr, sets
  ``MPCOMPAT_AUTOSTART_FAILED`` so that child processes skip the hook, and the interpreter
  carries on without mpcompat.

It lives outside the ``mpcompat`` package so that a broken package cannot break the hook that
imports it. It never raises, prints nothing when all goes well, and a second call (virtualenvs
process ``.pth`` files twice) does nothing.
"""
import os
import sys

FAILED_VAR = "MPCOMPAT_AUTOSTART_FAILED"

# The routes that called main() in this process, first one first.
calls = []
# What the first call did: "activated", "disabled by MPCOMPAT_DISABLE",
# "skipped after a failure in a parent process" or "failed: <error>".
outcome = None


def main(route="mpcompat.start"):
    """Activate mpcompat at interpreter start; ``route`` names the hook that calls."""
    global outcome
    calls.append(route)
    if outcome is not None:
        return
    # The same test as mpcompat.activation.env_disabled(), which cannot be imported without
    # importing (and so activating) mpcompat.
    if os.environ.get("MPCOMPAT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        outcome = "disabled by MPCOMPAT_DISABLE"
        return
    if os.environ.get(FAILED_VAR):
        outcome = "skipped after a failure in a parent process"
        return
    try:
        import mpcompat  # noqa: F401  (importing activates)
        outcome = "activated"
    except Exception as exc:
        outcome = "failed"
        try:
            _fail(exc)
        except Exception:  # an exception that cannot even be printed: stay quiet, carry on
            pass


def _fail(exc):
    global outcome
    reason = "%s: %s" % (type(exc).__name__, exc)
    for char in "\r\n\0":
        reason = reason.replace(char, " ")
    reason = reason[:300]
    outcome = "failed: " + reason
    # No half-imported submodules stay behind: a later explicit import starts afresh.
    for name in [n for n in sys.modules if n == "mpcompat" or n.startswith("mpcompat.")]:
        del sys.modules[name]
    os.environ[FAILED_VAR] = reason
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write("mpcompat: auto-activation failed, mpcompat stays off in this process and "
                     "its children (%s)\n" % reason)
        stream.flush()
    except Exception:
        pass
