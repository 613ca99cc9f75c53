"""Patch ``multiprocessing.failure_records``: the channel that carries a child's start-up error
to its parent (``mpcompat.child_failures.channel``), and the parent's word on a plain Process
(patches.md).

- ``BaseProcess.start`` opens the channel before the first child starts, and tells it the new
  child's pid: records are read from it, and one an earlier child with that pid left untaken is
  dropped.
- ``spawn.get_preparation_data`` sends its address to a spawn or forkserver child, whose
  ``spawn.prepare`` takes it before the main module is imported; ``prepare`` and that import
  also name the step a record names (``spawn_child.step``).
- ``BaseProcess._bootstrap``, which runs in every child as it starts, points ``faulthandler``
  at a file its parent reads when the child crashes (``mpcompat.child_failures.crash_stacks``); the
  start names the crash file's path in the child; ``join`` and ``is_alive`` (a terminated
  Pool's workers are not all joined) remove a file no crash wrote.
- ``BaseProcess.start`` also tells a spawn or forkserver child who names its start-up error
  (``channel.NAMED``, in its preparation data): the owner of a worker whose patch names it in
  the error its wait raises, or the parent of a plain ``Process`` (the child prints nothing);
  nobody for a worker whose owner's patch is off or not applied (the child sends no record,
  and its one line says all).
- ``BaseProcess.join``, and ``is_alive`` once it sees the end: a plain ``Process`` (not a worker
  whose owner names the cause) that exits non-zero after recording why is named once per cause,
  as an ``MpcompatWarning``; as the process exits (after multiprocessing has joined its
  children), so is every record still untaken (a ``Process`` nobody joined), at the line that
  started it.
- ``forkserver.connect_to_new_process``: a forkserver that died says so (``exits.forkserver_died``);
  ``forkserver.main`` loads once the patches its children would each load (:func:`_preload`).

Plain functions, not wrapt: the standard-library patches do not import it.
"""
import collections
import functools
import os
import signal
import sys
import threading
import types

from mpcompat.child_failures import channel, crash_stacks, spawn_child  # here: Pool helper
from mpcompat.patching.patcher import Patcher  # threads start
from mpcompat.workers.user_frames import without_own_frames

patcher = Patcher()
# Targets whose owners name a dead worker's cause in their own error.
_OWNED = ("multiprocessing.pool", "concurrent.futures.process", "torch.")
_OWNED_MARK = "_mpcompat_owner_names_failures"
_ENDED_MARK = "_mpcompat_ended"
_NAMED_MARK = "_mpcompat_named"  # a plain Process whose end was looked into
# Worker targets, and the patch whose error (the one its owner's wait raises) names a worker
# that failed while starting: while it is applied, such a worker prints nothing.
_NAMED_BY = {
    ("multiprocessing.pool", "worker"): "mpcompat.patches.mp_pool_workers",
    ("concurrent.futures.process", "_process_worker"): "mpcompat.patches.futures_process_workers",
    ("torch.utils.data._utils.worker", "_worker_loop"):
        "mpcompat.patches.torch_dataloader_workers",
    ("torch.multiprocessing.spawn", "_wrap"): "mpcompat.patches.torch_spawn_errors",
}
_starting = threading.local()  # named: who names the start-up error of the child it starts
# pid -> name of each plain Process started and not seen ended yet (join, is_alive)
_plain = collections.OrderedDict()  # (and where: the file and line that called start())
_MAX_PLAIN = 100000
_REPORT_PRIORITY = channel.CLOSE_PRIORITY + 1  # at exit: after the children, before the close
_reporting = {}  # pid -> the finalizer that names the untaken records as this process exits


# Exit codes of native crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): never the parent's
# own terminate() or kill().
_CRASH_CODES = frozenset(-getattr(signal, name) for name in (
    "SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL") if hasattr(signal, name))


def _start(original):
    @functools.wraps(original)
    def start(self):
        channel.listen()
        _report_at_exit()
        # Read before: start() deletes the target (bpo-30775).
        target = getattr(self, "_target", None)
        module = getattr(target, "__module__", None) or ""
        owned = module.startswith(_OWNED)
        named = _named_by(target, getattr(self, "_args", ()), owned)
        since = channel.starting()
        crash_stacks.prepare(self)
        _starting.named = named
        try:
            original(self)
        finally:
            _starting.named = None
            channel.started(self.pid, since)
        if owned:
            self.__dict__[_OWNED_MARK] = True
        elif self.pid is not None:
            caller = _outside_mpcompat(sys._getframe(1))
            _plain[self.pid] = (self.name, caller.f_code.co_filename, caller.f_lineno)
            if len(_plain) > _MAX_PLAIN:
                _plain.popitem(last=False)
    return without_own_frames(start)


def _named_by(target, args, owned):
    """Who names the start-up error of a child with ``target`` (``channel.NAMED``): the owner
    of a known worker whose patch is applied (a Pool's worker only with its channel: a Pool that
    runs as the standard library's names nothing), the parent for a plain Process, else
    nobody (None: not sent)."""
    if not owned:
        return channel.BY_OWNER  # the parent warns
    key = (getattr(target, "__module__", None), getattr(target, "__qualname__", None))
    patch = sys.modules.get(_NAMED_BY.get(key, ""))
    try:
        if patch is None or not patch.patcher.applied():
            return None
    except Exception:
        return None
    if key[0] == "multiprocessing.pool" and not (
            args and type(args[0]) is types.SimpleNamespace and hasattr(args[0], "conn")):
        return None
    return channel.BY_OWNER


def _join(original):
    @functools.wraps(original)
    def join(self, timeout=None):
        original(self, timeout)
        _ended(self)
        if self.exitcode is not None:
            _name_end(self)
    return without_own_frames(join)


def _name_end(process, measured=True):
    """``process`` has ended (join; is_alive, ``measured`` False): a plain Process that exited
    non-zero is named, once, with what it recorded (a warning per cause), or, at join, what was
    measured (is_alive leaves a crash to join, which reads its stack)."""
    state = process.__dict__
    if state.get(_OWNED_MARK) or state.get(_NAMED_MARK) is True or \
            (not measured and state.get(_NAMED_MARK) == "looked"):
        return
    try:
        record = channel.take(process.pid) if process.exitcode else None
        if record is not None:  # warn, once per cause, with what the child recorded
            _warn_record(record, "Process %r" % process.name, at=_exit_join_at(process))
        elif process.exitcode and not measured:
            state[_NAMED_MARK] = "looked"  # is_alive looks once; join measures
            return
        elif process.exitcode:
            _died_unheard(process)
    except Exception:
        pass
    state[_NAMED_MARK] = True
    _plain.pop(process.pid, None)


def _outside_mpcompat(frame):
    """The first frame from ``frame`` outward that is not mpcompat's (the outermost if all
    are)."""
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
            "mpcompat."):
        frame = frame.f_back
    return frame


def _exit_join_at(process):
    """The line that started ``process`` when multiprocessing itself joins it as this process
    exits (no line of the user's is on the stack then), else None: the user's frame."""
    frame = _outside_mpcompat(sys._getframe(1))
    started = _plain.get(process.pid)
    at_exit = frame.f_globals.get("__name__") == "multiprocessing.util"
    return started[1:] if started is not None and at_exit else None


def _warn_record(record, what, at=None):
    from mpcompat.errors import warn
    note = channel.describe_records([record], what)
    warn(note[len(channel.PREFIX):], key=repr(record.alike()), at=at)


def _report_at_exit():
    """Once per process: as it exits, after multiprocessing has joined or terminated its
    children, name the records of plain Processes nobody took (never joined, nor seen ended;
    a worker's are its owner's to name)."""
    pid = os.getpid()
    if pid not in _reporting:
        try:
            from multiprocessing import util  # the first start: in the user's thread
            _reporting[pid] = util.Finalize(None, _name_untaken, exitpriority=_REPORT_PRIORITY)
        except Exception:
            pass


def _name_untaken():
    try:
        for record in channel.untaken():
            started = _plain.pop(record.pid, None)
            if started is not None:
                _warn_record(record, "Process %r" % started[0], at=started[1:])
    except Exception:
        pass


def _died_unheard(process):
    """A plain Process ended with no record: warn, once per cause, when what ended it was not
    the parent's doing (a native crash; a SIGKILL the OOM killer is shown to have sent), with
    what was measured."""
    from mpcompat.child_failures import exits
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
            _name_end(self, measured=False)  # a plain Process polled, maybe never joined
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
        address = channel.address()
        if address is not None and isinstance(data, dict):
            data[channel.KEY] = address  # prepare() ignores keys it does not know
            named = getattr(_starting, "named", None)  # set by start(), in this thread
            if named is not None:
                data[channel.NAMED] = named
        return data
    return without_own_frames(get_preparation_data)


def _connect_to_new_process(original, module):
    @functools.wraps(original)
    def connect_to_new_process(fds):
        try:
            return original(fds)
        except (OSError, EOFError) as exc:
            server = getattr(module, "_forkserver", None)
            from mpcompat.child_failures.exits import forkserver_died  # loaded by apply()
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
        if not channel.spawn_child_starting():
            # what describe_records() needs, in a parent
            import mpcompat.child_failures.exits  # noqa: F401
        return
    for name, wrap in (("get_preparation_data", _get_preparation_data),
                       ("prepare", spawn_child.staged("preparing to run what its parent sent",
                                                      hear=True)),
                       ("_fixup_main_from_path", spawn_child.staged(spawn_child.IMPORTING)),
                       ("_fixup_main_from_name", spawn_child.staged(spawn_child.IMPORTING))):
        patcher.replace(module, name, wrap(patcher.original(module, name)))
    process = module.process
    if getattr(process.current_process(), "_inheriting", False) or process.parent_process():
        spawn_child.joined_late(module)


def revert(module):
    """Put back what is still ours."""
    patcher.restore(module)
