"""mpcompat's start-up hook, installed as a top-level module next to ``mpcompat.pth``.

``mpcompat.pth`` (``mpcompat.start`` on Python 3.15+) and the sitecustomize of ``mpcompat run``
call :func:`main`, which does what ``import mpcompat`` does and nothing more:

- with ``MPCOMPAT_DISABLE`` set it returns without importing anything;
- after a failed start-up in an ancestor process (``MPCOMPAT_AUTOSTART_FAILED`` is set) it
  returns without trying again;
- otherwise it imports mpcompat. If that fails (a file of the package is broken or missing)
  it writes one line to stderr, sets ``MPCOMPAT_AUTOSTART_FAILED`` so that child processes skip
  the hook, and the interpreter carries on without mpcompat. (A broken file that mpcompat loads
  later is reported by mpcompat itself, in the same way.)

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
        import mpcompat  # importing activates
        outcome = "activated" if mpcompat.is_active() else "failed: mpcompat stayed off"
    except Exception as exc:
        outcome = "failed"
        try:
            _fail(exc)
        except Exception:  # an exception that cannot even be printed: stay quiet, carry on
            pass


def _where(exc):
    """``mpcompat/<file>.py`` where ``exc`` comes from, or None."""
    path = exc.filename if isinstance(exc, SyntaxError) else None
    tb = exc.__traceback__
    while path is None and tb is not None:
        if tb.tb_next is None:
            path = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    cut = (path or "").rfind(os.sep + "mpcompat" + os.sep)
    return path[cut + 1:].replace(os.sep, "/") if cut >= 0 else None


def _ours(obj):
    name = obj if isinstance(obj, str) else getattr(obj, "__module__", None) or ""
    return name == "mpcompat" or name.startswith("mpcompat.")


def _fail(exc):
    global outcome
    reason = "%s: %s" % (type(exc).__name__, exc)
    where = _where(exc)
    if where:
        reason = "%s: %s" % (where, reason)
    for char in "\r\n\0":
        reason = reason.replace(char, " ")
    reason = reason[:300]
    outcome = "failed: " + reason
    # No half-activated mpcompat stays behind (its import hook, its reducers), nor half-imported
    # submodules: a later explicit import starts afresh.
    sys.meta_path[:] = [f for f in sys.meta_path if not _ours(type(f))]
    import copyreg
    for cls, reducer in list(copyreg.dispatch_table.items()):
        if _ours(reducer):
            del copyreg.dispatch_table[cls]
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    if os.environ.get(FAILED_VAR):  # said already, by an ancestor process
        return
    os.environ[FAILED_VAR] = reason
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write("mpcompat: auto-activation failed, it stays off in this process and its "
                     "children (%s); reinstall mpcompat to fix this\n" % reason)
        stream.flush()
    except Exception:
        pass
