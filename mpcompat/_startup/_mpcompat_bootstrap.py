"""mpcompat's start-up hook: a top-level module next to ``mpcompat.pth``, outside the package
so that a broken package cannot break it.

``mpcompat.pth`` (``mpcompat.start`` on 3.15+) and ``mpcompat run``'s sitecustomize call
:func:`main`: what ``import mpcompat`` does, never raising, silent when all goes well, and
nothing on a second call (virtualenvs process ``.pth`` files twice).
"""
import os
import sys

FAILED_VAR = "MPCOMPAT_AUTOSTART_FAILED"
calls = []  # the routes that called main() in this process, first one first
# What the first call did: "activated", "disabled by MPCOMPAT_DISABLE",
# "skipped after a failure in a parent process" or "failed: <error>".
outcome = None


def main(route="mpcompat.start"):
    """Activate mpcompat at interpreter start (``route``: the hook that calls), unless
    MPCOMPAT_DISABLE or FAILED_VAR (a failure in an ancestor process) is set. A failed import (a
    file of the package broken or missing) costs one line on stderr and sets FAILED_VAR for
    the children; the interpreter carries on without mpcompat."""
    global outcome
    calls.append(route)
    if outcome is not None:
        return
    # The same test as mpcompat.activation.env_disabled(), which cannot be imported without
    # importing (and so activating) mpcompat.
    if os.environ.get("MPCOMPAT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        outcome = "disabled by MPCOMPAT_DISABLE"
    elif os.environ.get(FAILED_VAR):
        outcome = "skipped after a failure in a parent process"
    else:
        try:
            import mpcompat  # importing activates
            outcome = "activated" if mpcompat.is_active() else "failed: mpcompat stayed off"
        except Exception as exc:
            outcome = "failed"
            try:
                _fail(exc)
            except Exception:  # an exception that cannot even be printed: stay quiet, carry on
                pass


def _ours(obj):
    name = obj if isinstance(obj, str) else getattr(obj, "__module__", None) or ""
    return name == "mpcompat" or name.startswith("mpcompat.")


def _fail(exc):
    global outcome
    # "mpcompat/<file>.py: " where the error comes from, when it does
    path = exc.filename if isinstance(exc, SyntaxError) else None
    tb = exc.__traceback__
    while path is None and tb is not None:
        if tb.tb_next is None:
            path = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    cut = (path or "").rfind(os.sep + "mpcompat" + os.sep)
    where = path[cut + 1:].replace(os.sep, "/") + ": " if cut >= 0 else ""
    reason = where + "%s: %s" % (type(exc).__name__, exc)
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
    try:  # (no stderr: nothing said)
        sys.stderr.write("mpcompat: auto-activation failed, it stays off in this process and "
                         "its children (%s); reinstall mpcompat to fix this\n" % reason)
        sys.stderr.flush()
    except Exception:
        pass
