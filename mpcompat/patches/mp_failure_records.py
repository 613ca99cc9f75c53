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
- ``BaseProcess.join``: a plain ``Process`` (not a worker whose owner names the cause) that
  exits non-zero after recording why is named once per cause, as an ``MpcompatWarning``.
- ``forkserver.connect_to_new_process``: a forkserver that died says so (``exits.forkserver_died``);
  ``forkserver.main`` loads once the patches its children would each load (:func:`_preload`).

Plain functions, not wrapt: the standard-library patches do not import it.
"""
import functools
import signal

from mpcompat.child_failures import channel, crash_stacks, spawn_child  # here: Pool helper
from mpcompat.patching.patcher import Patcher  # threads start
from mpcompat.workers.user_frames import without_own_frames

patcher = Patcher()
# Targets whose owners name a dead worker's cause in their own error.
_OWNED = ("multiprocessing.pool", "concurrent.futures.process", "torch.")
_OWNED_MARK = "_mpcompat_owner_names_failures"
_ENDED_MARK = "_mpcompat_ended"


# Exit codes of native crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): never the parent's
# own terminate() or kill().
_CRASH_CODES = frozenset(-getattr(signal, name) for name in (
    "SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL") if hasattr(signal, name))


def _start(original):
    @functools.wraps(original)
    def start(self):
        channel.listen()
        # Read before: start() deletes the target (bpo-30775).
        module = getattr(getattr(self, "_target", None), "__module__", None) or ""
        owned = module.startswith(_OWNED)
        since = channel.starting()
        crash_stacks.prepare(self)
        try:
            original(self)
        finally:
            channel.started(self.pid, since)
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
                record = channel.take(self.pid)
                if record is not None:
                    from mpcompat.errors import warn
                    note = channel.describe_records([record], "Process %r" % self.name)
                    warn(note[len(channel.PREFIX):],
                         key=repr(record.alike()))
                else:
                    _died_unheard(self)
            except Exception:
                pass
    return without_own_frames(join)


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
