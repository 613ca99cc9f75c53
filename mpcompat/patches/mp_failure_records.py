"""Patch ``multiprocessing.failure_records``: the channel that carries a child's start-up error
to its parent (``mpcompat.workers.child_failures``), and the parent's word on a plain Process
(patches.md).

- ``BaseProcess.start`` opens the channel before the first child starts, and tells it the new
  child's pid: records are read from it, and one an earlier child with that pid left untaken is
  dropped.
- ``spawn.get_preparation_data`` sends its address to a spawn or forkserver child, whose
  ``spawn.prepare`` takes it before the main module is imported; ``prepare`` and that import
  also name the step a record names (:func:`step`).
- ``BaseProcess._bootstrap``, which runs in every child as it starts, points ``faulthandler``
  at a file its parent reads when the child crashes (``mpcompat.workers.crash_stacks``); the
  start names the crash file's path in the child; ``join`` and ``is_alive`` (a terminated
  Pool's workers are not all joined) remove a file no crash wrote.
- ``BaseProcess.join``: a plain ``Process`` (not a worker whose owner names the cause) that
  exits non-zero after recording why is named once per cause, as an ``MpcompatWarning``.
- ``forkserver.connect_to_new_process``: a forkserver that died says so (:func:`forkserver_died`);
  ``forkserver.main`` loads once the patches its children would each load (:func:`_preload`).

Plain functions, not wrapt: the standard-library patches do not import it.
"""
import functools
import os
import signal
import sys

from mpcompat.patching.patcher import Patcher
from mpcompat.workers import child_failures, crash_stacks  # here: Pool helper threads start
from mpcompat.workers.user_frames import explained, without_own_frames

patcher = Patcher()
# Targets whose owners name a dead worker's cause in their own error.
_OWNED = ("multiprocessing.pool", "concurrent.futures.process", "torch.")
_OWNED_MARK = "_mpcompat_owner_names_failures"
_ENDED_MARK = "_mpcompat_ended"
_UNPICKLING = "unpickling the process object its parent sent"
_IMPORTING = "importing the main module %s as __mp_main__"


class _Child(object):
    """``stage``: what ``spawn._main`` does in this child (:func:`_staged`); ``importing``: the
    main module being imported when mpcompat came with it."""
    stage = importing = None


_child = _Child()
# Exit codes of native crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): never the parent's
# own terminate() or kill().
_CRASH_CODES = frozenset(-getattr(signal, name) for name in (
    "SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL") if hasattr(signal, name))


def _start(original):
    @functools.wraps(original)
    def start(self):
        child_failures.listen()
        # Read before: start() deletes the target (bpo-30775).
        module = getattr(getattr(self, "_target", None), "__module__", None) or ""
        owned = module.startswith(_OWNED)
        since = child_failures.starting()
        crash_stacks.prepare(self)
        try:
            original(self)
        finally:
            child_failures.started(self.pid, since)
        if owned:
            self.__dict__[_OWNED_MARK] = True
    return without_own_frames(start)


def _join(original):
    @functools.wraps(original)
    def join(self, timeout=None):
        original(self, timeout)
        _ended(self)
        if self.exitcode and not self.__dict__.get(_OWNED_MARK):
            try:  # warn, once per cause, with what the child recorded
                record = child_failures.take(self.pid)
                if record is not None:
                    from mpcompat.errors import warn
                    note = child_failures.describe([record], "Process %r" % self.name)
                    warn(note[len(child_failures.PREFIX):],
                         key=repr((record["error"], record["notes"], record["what"])))
                else:
                    _died_unheard(self)
            except Exception:
                pass
    return without_own_frames(join)


def _died_unheard(process):
    """A plain Process ended with no record: warn, once per cause, when what ended it was not
    the parent's doing (a native crash; a SIGKILL the OOM killer is shown to have sent), with
    what was measured."""
    from mpcompat.workers import exits
    lines = exits.dead_lines(process.exitcode, None, pid=process.pid)
    how = exits.describe_exit(process.exitcode, process.pid)
    if process.exitcode in _CRASH_CODES or "OOM killer" in how:
        from mpcompat.errors import warn
        warn("Process %r (pid %d) was %s.\n%s" % (process.name, process.pid, how,
                                                   "\n".join(lines)),
             key="process-%s" % how)


def _is_alive(original):
    @functools.wraps(original)
    def is_alive(self):
        alive = original(self)
        if not alive:
            _ended(self)  # a Pool's terminate() joins only the workers still alive
        return alive
    return is_alive


def _ended(process):
    """``process`` has ended, or was never started: remove the crash file it may have left
    without crashing, once."""
    if process.exitcode and not process.__dict__.get(_ENDED_MARK):
        process.__dict__[_ENDED_MARK] = True
        crash_stacks.joined(process.pid, process.exitcode)


def _bootstrap(original):
    @functools.wraps(original)
    def bootstrap(self, *args, **kwargs):
        crash_stacks.arm(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            crash_stacks.disarm()
    return bootstrap


def _get_preparation_data(original):
    @functools.wraps(original)
    def get_preparation_data(*args, **kwargs):
        data = original(*args, **kwargs)
        address = child_failures.address()
        if address is not None and isinstance(data, dict):
            data[child_failures.KEY] = address  # prepare() ignores keys it does not know
        return data
    return without_own_frames(get_preparation_data)


def _staged(stage, hear=False):
    """A wrapper that sets ``_child.stage`` (``%s``: the first argument) while the wrapped step
    runs, left set if it fails; ``hear``: the first argument is the preparation data."""
    def wrap(original):
        @functools.wraps(original)
        def staged(arg, *args, **kwargs):
            if hear:
                child_failures.heard_from_parent(arg)
            outer, _child.stage = _child.stage, stage % arg if "%s" in stage else stage
            result = original(arg, *args, **kwargs)
            _child.stage = outer
            return result
        return without_own_frames(staged)
    return wrap


def step():
    """In a spawn or forkserver child failing in ``spawn._main``: what it was doing."""
    # spawn makes the main module it imported __main__; it is not so while that import fails.
    if _child.importing and sys.modules["__main__"].__name__ != "__mp_main__":
        return _IMPORTING % _child.importing
    return _child.stage or _UNPICKLING


def _connect_to_new_process(original, module):
    @functools.wraps(original)
    def connect_to_new_process(fds):
        try:
            return original(fds)
        except (OSError, EOFError) as exc:
            server = getattr(module, "_forkserver", None)
            forkserver_died(exc, getattr(server, "_forkserver_pid", None))
            raise
    return without_own_frames(connect_to_new_process)


def _serving(original):
    @functools.wraps(original)
    def main(*args, **kwargs):
        _preload()
        return original(*args, **kwargs)
    return without_own_frames(main)


def _preload():
    """In a forkserver, before it serves: load once the patches of the multiprocessing modules
    it has not imported (a Pool's ``multiprocessing.pool``), which each child it forks would
    load again when it imports them. Never raises."""
    try:
        from mpcompat.activation import ensure_armed
        ensure_armed().preload("multiprocessing.")
    except Exception:
        pass


def forkserver_died(exc, pid):
    """``exc`` came from forkserver ``pid``, which could not start a child: if it has exited,
    say so on ``exc``, with the main script's module-level line that killed it. Never raises."""
    try:
        status = _exit_status(pid) if pid else None
        if status is None:
            return
        from mpcompat.diagnose import main_guard
        from mpcompat.diagnose.notes import PREFIX, add_note
        path = main_guard.main_file()
        text = ("the forkserver process (pid %d), which starts this program's forkserver child "
                "processes, %s before it could start this one; its own line, above on "
                "stderr, says why." % (pid, status))
        if path is not None and sys.version_info >= (3, 14):
            text += (" From Python 3.14 the forkserver imports the main module, %s, when it "
                     "starts, so the module-level code of %s runs there too."
                     % (path, os.path.basename(path)))
            line = _main_line(path, main_guard)
            if line is not None:
                text += (" Line %d of %s starts processes at module level, outside `if __name__ "
                         "== \"__main__\":`, so it ran again in the forkserver and failed there. "
                         "Put the code that starts processes under `if __name__ == "
                         "\"__main__\":`." % (line, os.path.basename(path)))
        import textwrap
        add_note(exc, textwrap.fill(PREFIX + text, 100))
        explained(exc)
    except Exception:
        pass


def _exit_status(pid, wait=1.0):
    """How child ``pid`` ended, e.g. "ended (exit code 1)", or None while it runs; not reaped
    (multiprocessing waits for its forkserver itself)."""
    import time
    if not hasattr(os, "waitid"):
        return None
    deadline = time.monotonic() + wait  # the socket closes a moment before the exit
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except OSError:
            return None
        if info is not None and info.si_pid:
            from mpcompat.workers.exits import describe_exit
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            return "ended (%s)" % describe_exit(code, pid)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _main_line(path, main_guard):
    """The line of the main script, at module level outside a main guard, this thread runs."""
    # A frame read: the script's line that starts processes is in no state of multiprocessing.
    frame, line = sys._getframe(1), None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__" \
                and frame.f_code.co_filename == path:
            line = frame.f_lineno
        frame = frame.f_back
    analysis = main_guard.analyze(path) if line is not None else None
    return None if analysis is None or analysis.guards_line(line) else line


def _joined_late(module):
    """mpcompat came late into a spawn or forkserver child (the script's ``import mpcompat``):
    take the parent's channel from a running ``spawn._main``, and note the main module being
    imported, if it is."""
    # A frame read: the preparation data the parent sent is held by spawn._main's frame alone.
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_name != "_main" or
                                 frame.f_globals is not module.__dict__):
        frame = frame.f_back
    if frame is None:
        return  # a fork child, or a forkserver importing the main module (Python 3.14+)
    child_failures.heard_from_parent(frame.f_locals.get("preparation_data"))
    main = sys.modules.get("__mp_main__")
    if main is not None and main is not sys.modules.get("__main__"):  # runpy's, while it runs
        _child.importing = getattr(main.__spec__, "name", None) or main.__file__


def apply(module):
    """Wrap ``BaseProcess.start``, ``join``, ``is_alive`` and ``_bootstrap``
    (``multiprocessing.process``),
    ``get_preparation_data``, ``prepare`` and the import of the main module (``spawn``) or
    ``connect_to_new_process`` and ``main`` (``forkserver``)."""
    if module.__name__ == "multiprocessing.forkserver":
        # popen_forkserver calls the module's alias of the one ForkServer's bound method.
        patcher.replace(module, "connect_to_new_process", _connect_to_new_process(
            patcher.original(module, "connect_to_new_process"), module))
        patcher.replace(module, "main", _serving(patcher.original(module, "main")))
        return
    if module.__name__ == "multiprocessing.process":
        cls = module.BaseProcess
        patcher.replace(cls, "start", _start(patcher.original(cls, "start")))
        patcher.replace(cls, "join", _join(patcher.original(cls, "join")))
        patcher.replace(cls, "is_alive", _is_alive(patcher.original(cls, "is_alive")))
        patcher.replace(cls, "_bootstrap", _bootstrap(patcher.original(cls, "_bootstrap")))
        if not child_failures.spawn_child_starting():
            import mpcompat.workers.exits  # noqa: F401  (what describe() needs, in a parent)
        return
    for name, wrap in (("get_preparation_data", _get_preparation_data),
                       ("prepare", _staged("preparing to run what its parent sent", hear=True)),
                       ("_fixup_main_from_path", _staged(_IMPORTING)),
                       ("_fixup_main_from_name", _staged(_IMPORTING))):
        patcher.replace(module, name, wrap(patcher.original(module, name)))
    process = module.process
    if getattr(process.current_process(), "_inheriting", False) or process.parent_process():
        _joined_late(module)


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
