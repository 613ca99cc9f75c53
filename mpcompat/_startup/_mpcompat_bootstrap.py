"""mpcompat's start-up hook: a top-level module next to ``mpcompat.pth``, outside the package
so that a broken package cannot break it.

``mpcompat.pth`` (``mpcompat.start`` on 3.15+) and ``mpcompat run``'s sitecustomize call
:func:`main`, which never raises, is silent when all goes well and does nothing on a second call
(virtualenvs process ``.pth`` files twice). It loads nothing of the package: a finder watches
for the first import of a module mpcompat acts on (one that pickles or copies, a patch target),
and that import activates mpcompat (``import mpcompat``). A process that imports none of them
pays for this file only.
"""
import sys

FAILED_VAR = "MPCOMPAT_AUTOSTART_FAILED"
calls = []  # the routes that called main() in this process, first one first
# What the first call did: "activated", one of ARMED (not yet, or the package is importing),
# "disabled by MPCOMPAT_DISABLE", "skipped after a failure in a parent process" or
# "failed: <error>".
outcome = None
ARMED = ("activating", "waiting for the first import of a trigger")
# The targets of mpcompat.patching.PATCHES, under the environment variable that turns their patch
# on (None: always on); tests/startup/test_startup_lazy.py checks that they are the table's.
TARGETS = {
    None: ("multiprocessing.reduction", "multiprocessing.spawn", "multiprocessing.process",
           "multiprocessing.forkserver", "multiprocessing.popen_fork",
           "multiprocessing.popen_forkserver", "multiprocessing.pool",
           "concurrent.futures.process", "concurrent.futures.interpreter", "torch",
           "torch._jit_internal", "torch.serialization", "torch.cuda",
           "torch.utils.data._utils.worker", "torch.utils.data.dataloader",
           "torch.multiprocessing.spawn", "torch.distributed.elastic.multiprocessing.errors",
           "torch.distributed.rendezvous", "torch.distributed.launcher.api",
           "nuscenes.eval.detection.data_classes", "nuscenes.eval.tracking.data_classes", "cv2"),
    "MPCOMPAT_HANG_DUMP": ("multiprocessing.pool", "multiprocessing.process",
                           "concurrent.futures._base", "torch.distributed.distributed_c10d",
                           "torch.distributed", "torch.utils.data.dataloader",
                           "torch.multiprocessing.spawn"),
    "TORCHELASTIC_ERROR_FILE": ("sys",),
    "MPCOMPAT_SHARED_INFOS": ("mmdet.datasets.custom", "mmdet3d.datasets.custom_3d"),
}


# What pickles or copies, so needs the built-in reducers registered first: not copyreg itself,
# which re (json, logging, argparse) imports in nearly every program that never pickles.
PICKLERS = frozenset(("pickle", "_pickle", "copy"))


def watched():
    """The patch targets to watch in this process (their patches' variables read now)."""
    import os  # in each function, not at the top: see mpcompat_hook's comment
    return frozenset(TARGETS[None]).union(*(names for var, names in TARGETS.items()
                                            if var and os.environ.get(var, "").strip()))


# This module is the finder main() puts in front of sys.meta_path: a module, not an instance of
# a class of its own, and one that holds neither os nor os.environ, since what a finder holds
# stays alive into the interpreter's exit and is torn down there at a cost (callgrind: a class
# instance +0.45 M instructions, a global `os` +0.43 M, on `python -c pass`).
mpcompat_hook = True  # mpcompat's hook passes over it when it asks the finders behind it
triggers = frozenset()
# In the forkserver: the triggers its own start imports (the same on 3.8-3.15), which activate
# nothing there: it runs no code of the user's but what it preloads (the main module, from
# 3.14), which activates mpcompat where it imports a trigger (torch). Its children activate
# as they are forked (_forking).
SERVER_OWN = frozenset(("pickle", "_pickle", "multiprocessing.reduction",
                        "multiprocessing.process", "multiprocessing.spawn",
                        "multiprocessing.forkserver"))
server_own = frozenset()
server = []  # the forkserver's: its pid, then one None per child it forked


def find_spec(fullname, path=None, target=None):
    """As a meta path finder: activate mpcompat at a trigger's first import and hand the import
    to mpcompat's own hook; None (a set look-up) for every other name."""
    if fullname not in triggers:
        return None
    if fullname in server_own:  # the forkserver's own import: it activates nothing
        if fullname == "multiprocessing.forkserver":
            _serve()
        return None
    hook = _activate_unlocked()  # another thread activating meanwhile: waits, as imports do
    return hook.find_spec(fullname, path, target) if hook is not None else None


def main(route="mpcompat.start"):
    """Arm mpcompat's activation at interpreter start (``route``: the hook that calls), unless
    MPCOMPAT_DISABLE or FAILED_VAR (a failure in an ancestor process) is set. mpcompat activates
    at once when a trigger is imported already, else at the first import of one. A failed
    import of the package (a file of it broken or missing) costs one line on stderr and sets
    FAILED_VAR for the children; the interpreter carries on without mpcompat."""
    global outcome, server_own
    import os
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
        helper = _helper()
        if helper == "resource_tracker":
            outcome = "off in multiprocessing's resource tracker"
        else:
            names = watched() | PICKLERS
            if helper == "forkserver":
                server_own = SERVER_OWN
            _arm(names)


# (Comments, not docstrings, on the private functions here: this module's .pyc is unmarshalled
# by every Python process of the environment.)

def _arm(names):
    # Activate now where one of names is imported already, else at the first import of one
    # (this module becomes a finder).
    global outcome, triggers
    if not (names - server_own if server_own else names).isdisjoint(sys.modules):
        outcome = ARMED[0]
        _activate()
    else:
        outcome = ARMED[1]
        triggers = names
        if sys.modules[__name__] not in sys.meta_path:
            sys.meta_path.insert(0, sys.modules[__name__])


def _helper():
    # Which of multiprocessing's helper processes this process is, by its command line:
    # "resource_tracker", "forkserver", or None.
    if sys.argv[:1] != ["-c"]:
        return None
    command = getattr(sys, "orig_argv", None)  # 3.10+; before, the kernel's copy
    if command is None:
        try:
            with open("/proc/self/cmdline", "rb") as f:
                command = f.read().decode("utf-8", "replace").split("\0")[:-1]
        except OSError:
            return None
    for arg in command[1:]:  # 3.14's forkserver: its "import sys; " first, then sys.argv
        if arg.startswith("import sys; "):
            arg = arg[12:]
        for helper in ("resource_tracker", "forkserver"):
            if arg.startswith("from multiprocessing.%s import main;" % helper):
                return helper
    return None


def _serve():
    # In the forkserver, as it imports its own module: the fork hooks of _forking.
    import os
    if hasattr(os, "register_at_fork"):  # (registered now: after threading's own)
        server.append(os.getpid())
        os.register_at_fork(before=_forking, after_in_child=_forked)


def _forking():
    # In the forkserver, before each fork: its first child activates mpcompat itself
    # (_forked); from the second on, this process activates mpcompat, once, and applies what
    # its children would each apply as they start, which they then inherit (the cheaper way,
    # once there is more than one child to pay for).
    global server_own
    import os
    if server[:1] != [os.getpid()]:
        return
    server.append(None)
    if len(server) == 3:
        server_own = frozenset()
        try:
            if outcome in ARMED:
                _arm(triggers)
            patching = sys.modules["mpcompat.activation"].ensure_armed()
            patching.apply_deferred("multiprocessing.spawn")  # the worker patches' group
            patching.preload("multiprocessing.")  # and those of modules not imported yet
        except Exception:
            pass


def _forked():
    global server_own
    if server_own:
        server_own = frozenset()
        if outcome in ARMED:
            _arm(triggers)


def _activate_unlocked():
    # _activate() from find_spec(), which importlib calls holding the interpreter's global
    # import lock: importing mpcompat under it would wait forever for a thread importing
    # mpcompat itself (the user's import, an unpickled rebuild function), which needs that lock
    # for each module it imports. The lock is let go meanwhile, as often as this thread holds
    # it, and taken back.
    import _imp
    held = 0
    try:
        while True:
            _imp.release_lock()
            held += 1
    except Exception:  # RuntimeError: no longer held by this thread
        pass
    try:
        return _activate()
    finally:
        for _ in range(held):
            _imp.acquire_lock()


def _activate():
    # Import (so activate) mpcompat; return its import hook, or None where it failed.
    global outcome
    if outcome.startswith("failed"):
        return None
    try:
        import mpcompat  # importing activates (and sets outcome to "activated")
        if outcome in ARMED:  # imported before this hook ran
            outcome = "activated" if mpcompat.is_active() else "failed: mpcompat stayed off"
        return sys.modules["mpcompat.activation"].hook
    except Exception as exc:
        outcome = "failed"
        try:
            _fail(exc)
        except Exception:  # an exception that cannot even be printed: stay quiet, carry on
            pass
    return None


def _ours(obj):
    name = obj if isinstance(obj, str) else getattr(obj, "__module__", None) or ""
    return name == "mpcompat" or name.startswith("mpcompat.")


def _fail(exc):
    global outcome
    import os
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
