"""The multiprocessing patches that every child start loads, in one module: the first use of
any of their targets applies them all (``patching._WORKER_TARGETS``), in the parent as its first
child starts and in every child. The table names each patch's ``apply`` and ``revert`` here
(``impl``: ``mpcompat.patches.mp_children:<patch>``, the objects at the end).

``multiprocessing.failure_records``: what a child leaves for its parent to explain its
failure (patches.md). Every start pays only for what the parent needs later; a child only for
its own side; explaining is :mod:`mpcompat.child_failures.exits`' and ``.spawn_child``'s, loaded
when a failure is seen.

- ``BaseProcess.start``: the parent's side (``mpcompat.child_failures.channel``), loaded as the
  first child starts, in the user's thread (a Pool's helper threads only restart workers):
  the failure channel opens, each child's pid is told to it (records are read from it, one an
  earlier child with that pid left untaken is dropped), the child is told the path of its
  crash file, a plain Process is remembered with the line that started it.
- ``spawn.get_preparation_data`` sends the channel's address to a spawn or forkserver child,
  and who names the child's start-up error (:data:`NAMED`: the owner of a worker whose patch
  names it in the error its wait raises, or the parent of a plain ``Process``; nobody for a
  worker whose owner's patch is off or not applied: the child sends no record, and its one
  line says all). The child's ``spawn.prepare`` takes both before the main module is imported
  (:data:`child`); ``prepare`` and that import also name the step a record names. The child
  loads the channel only to send a record.
- ``BaseProcess._bootstrap``, as a child starts, creates its crash file and points
  ``faulthandler`` at it (:func:`arm`): a crash in native code (SIGSEGV, SIGBUS, SIGABRT,
  SIGFPE, SIGILL) writes the Python stack there, which the parent reads; a child that ends
  without crashing removes it (:func:`disarm`). A torchrun rank, which its agent starts with
  ``subprocess``, arms from its environment (:func:`arm_inherited`). Handlers installed before
  are chained: faulthandler restores the handler it found and raises the signal again; torch
  installs its own in a DataLoader worker after this start, and faulthandler is enabled again
  after them (:func:`_chain_after_torch`). A program's own faulthandler (``PYTHONFAULTHANDLER``,
  ``-X faulthandler``, ``-X dev``, ``faulthandler.enable()`` inherited by a fork) is left
  writing where it writes: faulthandler has one file, and the program asked for its dump there.
- ``BaseProcess._bootstrap`` also makes the child end with its parent (:func:`watch_parent`,
  ``mpcompat.workers.parent_death``): SIGIO as its parent sentinel closes, one line on its
  stderr, exit; not a child started while ``MPCOMPAT_OUTLIVE_PARENT`` is set (``start`` notes
  it in the child's ``_config``). A torchrun rank watches its agent (``arm_inherited``).
- ``BaseProcess.join``, and ``is_alive`` once it sees the end: a crash file no crash wrote is
  removed; a plain ``Process`` (not a worker whose owner names the cause) that exits non-zero
  after recording why is named once per cause, as an ``MpcompatWarning``; as the process exits
  (after multiprocessing has joined its children), so is every record still untaken (a
  ``Process`` nobody joined), at the line that started it.
- ``forkserver.connect_to_new_process``: a forkserver that died says so (``exits.forkserver_died``).

``multiprocessing.pickling_notes``: pickling errors in multiprocessing say what failed.

``reduction.dump`` (a Process object for a new process) and ``ForkingPickler.dumps`` (every
message) re-raise a pickling error with a note naming each part that cannot be pickled
(``mpcompat.diagnose.notes``). ``dumps`` is on the hot path: the stock one is replaced by its
same three lines inside a ``try`` (no extra call); anything else there is wrapped.

``multiprocessing.bootstrap_notes``: a child that fails while starting says why, and
its parent can learn it (patches.md).

``spawn._check_not_importing_main`` (no main guard) gains a note with the line and the fix;
what kills a spawn or forkserver child inside ``spawn._main`` gains the main-guard note and is
recorded for the parent. Where mpcompat is activated while ``spawn._main`` already runs (the
script's own ``import mpcompat``), a chained ``sys.excepthook`` does that instead. The work is
:mod:`mpcompat.child_failures.spawn_child`'s, loaded when a child fails.

``multiprocessing.exit_evidence``: what the kernel measured of each child's end, for the
reports of dead workers (``mpcompat.child_failures.channel``, said by ``.exits``).

``popen_fork.Popen`` (spawn's and forkserver's derive from it): ``__init__`` reads the OOM kill
counters just before the child starts; ``poll`` reaps with ``os.wait4`` instead of
``os.waitpid``, the same otherwise, which also gives the child's peak resident memory. The
forkserver reaps its own children and sends only their exit status: ``popen_forkserver.Popen
.poll`` notes the end, without the peak.

Runs in the Pool's and executors' threads that start and reap workers (the fork rule): all it
needs is imported as this process starts its first child (``__init__``, in the thread that
makes the Pool or the executor, before their threads start), not with the patch: spawn workers
apply it too, and start no child.

Plain functions, not wrapt: the standard-library patches do not import it. What the helper
threads of Pools and executors run here imports nothing.
"""
import faulthandler
import functools
import io
import os
import sys
import threading
from types import SimpleNamespace

from mpcompat.activation import imported, process_lock
from mpcompat.patcher import ExceptHooks, NotNeeded, Patcher, Skip

# --- multiprocessing.failure_records: the parent's side ------------------------------------------

records_patcher = Patcher()
KEY = "mpcompat_failure_channel"  # in the preparation data of spawn and forkserver children
NAMED = "mpcompat_failure_named"  # there too: who names the child's start-up error
CRASH_KEY = "mpcompat_crash_file"  # in a child's process object's _config: its crash file
CRASH_ENV = "MPCOMPAT_CRASH_FILES"  # the same, in the environment a torchrun agent gives its ranks
OUTLIVE_ENV = "MPCOMPAT_OUTLIVE_PARENT"  # set as start() runs: that child outlives its parent
OUTLIVE_KEY = "mpcompat_outlive_parent"  # in a child's _config: the same, as start() saw it
# OUTLIVE_ENV as os.environ keeps it (its values are bytes on POSIX): start() reads os.environ's
# own dict, where `in os.environ` runs three Python frames and a KeyError, whose pages each start
# writes (copy-on-write faults: about 12 a start, bench_fork_starts).
_OUTLIVE_RAW = getattr(os.environ, "encodekey", str)(OUTLIVE_ENV)
AGENT_ENV = "MPCOMPAT_AGENT_PID"  # in a torchrun rank's environment: its agent's pid
# fcntl's F_SETOWN_EX with F_OWNER_TID (struct f_owner_ex's type, 0), and O_ASYNC: Linux's.
_F_SETOWN_EX, _OWNER_TID, _O_ASYNC = 15, bytes(4), 0o20000
IMPORTING = "importing the main module %s as __mp_main__"
_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) |
          getattr(os, "O_CLOEXEC", 0))
# all_threads=False (the crashing thread's stack), and from 3.14 c_stack=False: the parent
# shows the Python stack; a C one is addresses. Positional: a keyword dict costs a fork child.
_ENABLE = (False,) if sys.version_info < (3, 14) else (False, False)
_TORCH_SIGNALS = "torch.utils.data._utils.signal_handling"
# Written (zeros) into each crash file as the child starts: a crash that comes when /dev/shm is
# full (the very SIGBUS of shared memory running out) still has room for its stack.
_RESERVED = bytes(8192)
_USER_FRAMES = "mpcompat.workers.user_frames"

# The parent's side, loaded by the first start in this process (pid): the channel module.
parent = SimpleNamespace(pid=None, channel=None)
# In a spawn or forkserver child starting up (spawn._main): stage, what it does (_staged);
# importing, the main module being imported when mpcompat came with it; told, (pid, the
# parent's channel, who names its start-up error) from its preparation data. Read by
# child_failures.spawn_child and .channel when a step fails.
child = SimpleNamespace(stage=None, importing=None, told=None)
# This process's own crash file: armed, (pid, fd, path) while faulthandler writes to it; user,
# the program's own faulthandler was on as this child started.
crash = SimpleNamespace(armed=None, user=False)
# The parent this process watches: armed, (pid, parent sentinel or None for a torchrun rank,
# the parent's pid, what this process is called in its death note).
watched = SimpleNamespace(armed=None)


_first_start = {}  # pid -> the lock of the first start in that process (activation.process_lock)


def _channel():
    """The parent's side (``mpcompat.child_failures.channel``), loaded and the channel opened
    by the first start in this process (or in a fork child that starts its own), or None where
    that failed."""
    if parent.pid != os.getpid():
        # Threads starting this process's first children at once: one opens the channel, the
        # others wait for it (not start theirs without it).
        with process_lock(_first_start):
            if parent.pid != os.getpid():
                opened = None
                try:
                    from mpcompat.child_failures import channel
                    channel.listen()
                    opened = channel
                except Exception:
                    pass
                parent.channel, parent.pid = opened, os.getpid()
    return parent.channel


def _drop_own_frames(exc):
    """``user_frames.drop_own_frames``, loaded at the first error (pay on failure) in the thread
    that starts or joins a child. A thread of multiprocessing's or concurrent.futures' (a Pool's,
    an executor's) imports nothing (the fork rule): its patch loaded it as the Pool or the
    executor was made, or its error keeps these frames."""
    user_frames, finished = imported(_USER_FRAMES)
    if user_frames is None or not finished:
        thread = threading.current_thread()
        owner = getattr(getattr(thread, "_target", None), "__module__", None) or \
            type(thread).__module__
        if owner.startswith(("multiprocessing.", "concurrent.futures.")):
            return
        from mpcompat.workers import user_frames
    user_frames.drop_own_frames(exc)


def _start(original):
    @functools.wraps(original)
    def start(self):
        data = getattr(os.environ, "_data", None)
        value = os.environ.get(OUTLIVE_ENV) if data is None else data.get(_OUTLIVE_RAW)
        if value is not None:
            self._config[OUTLIVE_KEY] = value not in ("", "0", b"", b"0")
        channel = parent.channel if parent.pid == os.getpid() else _channel()
        try:
            if channel is None:
                return original(self)
            channel.start_child(self, original)
        except BaseException as exc:
            _drop_own_frames(exc)
            raise
    return start


def _join(original):
    @functools.wraps(original)
    def join(self, timeout=None):
        try:
            original(self, timeout)
        except BaseException as exc:
            _drop_own_frames(exc)
            raise
        if self.exitcode is not None and parent.channel is not None:
            parent.channel.ended(self)
    return join


def _is_alive(original):
    @functools.wraps(original)
    def is_alive(self):
        alive = original(self)
        if not alive and parent.channel is not None:
            # A Pool's terminate() joins only the workers still alive; a plain Process may be
            # polled and never joined.
            parent.channel.ended(self, measured=False)
        return alive
    return is_alive


# --- a child as it starts ----------------------------------------------------------------------

def _bootstrap(original):
    @functools.wraps(original)
    def bootstrap(self, *args, **kwargs):
        if not self._config.get(OUTLIVE_KEY):
            watch_parent(kwargs.get("parent_sentinel", args[0] if args else None),
                         self._parent_pid, self.name)
        else:
            _leave_siblings()
        prefix = self._config.get(CRASH_KEY)
        if prefix is None:
            return original(self, *args, **kwargs)
        arm(prefix)
        try:
            return original(self, *args, **kwargs)
        finally:
            disarm()
    return bootstrap


def watch_parent(sentinel, parent, name):
    """In a ``multiprocessing`` child as it starts: end this process, with one line on its
    stderr, when ``sentinel`` (its parent sentinel, a pipe's read end whose only write end is
    its parent's) reaches EOF as ``parent`` (pid) dies (``mpcompat.workers.parent_death``).
    Linux; never raises."""
    # The kernel sends SIGIO to the main thread (its tid is the pid: a child starts with one)
    # as the last write end closes: no thread, no poll.
    if sentinel is None or not sys.platform.startswith("linux"):
        return
    try:
        import fcntl
        import _signal
        pid = os.getpid()
        watched.armed = (pid, sentinel, parent, "process %r" % name)
        _signal.signal(_signal.SIGIO, _parent_signal)
        fcntl.fcntl(sentinel, _F_SETOWN_EX, _OWNER_TID + pid.to_bytes(4, sys.byteorder))
        fcntl.fcntl(sentinel, fcntl.F_SETFL,
                    fcntl.fcntl(sentinel, fcntl.F_GETFL) | _O_ASYNC | os.O_NONBLOCK)
        try:
            if os.read(sentinel, 1) == b"":  # it died before the kernel was asked
                _parent_signal(_signal.SIGIO, None)
        except BlockingIOError:
            pass
    except Exception:
        pass


def _leave_siblings():
    """In a child that outlives its parent: close the parent's ends of its siblings' pipes that
    a fork child inherits (``close_fds`` finalizers of their Popens), so that the siblings still
    see their parent sentinel close as the parent dies. Never raises."""
    util = sys.modules.get("multiprocessing.util")
    try:
        for finalizer in list(util._finalizer_registry.values()):
            if getattr(finalizer, "_callback", None) is util.close_fds:
                for fd in finalizer._args:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
    except Exception:
        pass


def _parent_signal(signum, frame):
    """SIGIO (:func:`watch_parent`): ``parent_death.on_signal``, loaded as it comes."""
    if watched.armed is not None and watched.armed[0] == os.getpid():
        from mpcompat.workers.parent_death import on_signal
        on_signal(watched.armed)


def arm(prefix):
    """In a child as it starts (``prefix``: its crash file's path but the pid, as its parent
    named it): point faulthandler at its crash file, unless the program's own faulthandler is
    on. Never raises."""
    # One flat function: a fresh fork child pays a copy-on-write fault for each page it
    # first writes, object reference counts included, so every object touched here costs.
    try:
        pid = os.getpid()
        own = prefix + str(pid)
        armed = crash.armed  # a fork child inherits its parent's, and its descriptor
        if armed is None and faulthandler.is_enabled():
            crash.user = True
            if os.path.exists(own):
                os.unlink(own)  # a file another child with this pid left, unread
        else:
            try:
                fd = os.open(own, _FLAGS, 0o600)
            except FileExistsError:  # left by an earlier child with this pid, unread
                os.unlink(own)
                fd = os.open(own, _FLAGS, 0o600)
            os.pwrite(fd, _RESERVED, 0)  # the offset stays 0, where faulthandler writes
            faulthandler.enable(fd, *_ENABLE)
            crash.armed, crash.user = (pid, fd, own), False
            if armed is not None:
                os.close(armed[1])
        if _TORCH_SIGNALS in sys.modules:
            _chain_after_torch()
    except Exception:
        pass


def arm_inherited():
    """In a process started by a parent that shared its crash files' path
    (``channel.share_with_children``: a torchrun rank): arm as :func:`arm` does; the file goes
    at exit. A rank whose agent named its pid (:data:`AGENT_ENV`) ends with it
    (``parent_death.watch_agent``). Never raises."""
    if os.environ.get(AGENT_ENV):
        from mpcompat.workers.parent_death import watch_agent
        watch_agent(sys.modules[__name__])
    prefix = os.environ.get(CRASH_ENV)
    if prefix:
        import atexit
        arm(prefix)
        atexit.register(disarm)


def disarm():
    """In a child that ends without crashing: remove its crash file (faulthandler keeps the
    descriptor: closing it could let a later crash write into a file opened after). Never
    raises."""
    armed = crash.armed
    if armed is not None and armed[0] == os.getpid():
        try:
            os.unlink(armed[2])
        except OSError:
            pass


def _chain_after_torch():
    """In a DataLoader worker: torch sets its SIGSEGV, SIGBUS and SIGFPE handlers as its loop
    starts, replacing faulthandler's; enable faulthandler again after them, so that it writes
    the stack, then calls torch's handler (which prints its own message and dies)."""
    module = sys.modules.get(_TORCH_SIGNALS)
    original = getattr(module, "_set_worker_signal_handlers", None)
    if original is None or getattr(original, "_mpcompat_chained", False):
        return

    def _set_worker_signal_handlers(*args, **kwargs):
        mine = crash.armed is not None and crash.armed[0] == os.getpid()
        if mine or crash.user:
            # disable() puts back the handlers faulthandler replaced: torch's must come after.
            faulthandler.disable()
        result = original(*args, **kwargs)
        if mine:
            faulthandler.enable(crash.armed[1], *_ENABLE)
        elif crash.user:
            # The program's own faulthandler, back (to stderr, its default: the file it was
            # given cannot be read back), where torch alone would leave it no signal.
            faulthandler.enable(file=2, all_threads=True)
        return result
    _set_worker_signal_handlers._mpcompat_chained = True
    module._set_worker_signal_handlers = _set_worker_signal_handlers


# --- multiprocessing.spawn: a spawn or forkserver child starting up ------------------------------

def _get_preparation_data(original):
    @functools.wraps(original)
    def get_preparation_data(name, *args, **kwargs):
        try:
            data = original(name, *args, **kwargs)
        except BaseException as exc:
            _drop_own_frames(exc)
            raise
        channel = parent.channel
        address = channel.address() if channel is not None else None
        if address is not None and isinstance(data, dict):
            data[KEY] = address  # prepare() ignores keys it does not know
            named = channel.named_for(name, sys._getframe(1))
            if named is not None:
                data[NAMED] = named
        return data
    return get_preparation_data


def hear_from_parent(data):
    """In a spawn or forkserver child: ``data``, the preparation data its parent sent, may name
    the parent's channel (:data:`KEY`), and who names this child's start-up error
    (:data:`NAMED`)."""
    value = data.get(KEY) if isinstance(data, dict) else None
    if isinstance(value, str) and value:
        child.told = (os.getpid(), value, data.get(NAMED))


def joined_late():
    """Where mpcompat came while ``spawn._main`` runs (the script's ``import mpcompat`` as the
    child imports its main module or unpickles what its parent sent: its ``prepare`` was not
    wrapped): take the parent's channel from ``spawn._main``, and note the main module being
    imported, if it is. Nothing where no ``spawn._main`` runs (a parent, a fork child)."""
    # A frame read: the preparation data the parent sent is held by spawn._main's frame alone.
    spawn = sys.modules.get("multiprocessing.spawn")
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_name != "_main" or
                                 frame.f_globals is not getattr(spawn, "__dict__", None)):
        frame = frame.f_back
    if frame is None:
        return
    hear_from_parent(frame.f_locals.get("preparation_data"))
    main = sys.modules.get("__mp_main__")
    if main is not None and main is not sys.modules.get("__main__"):  # runpy's, while it runs
        child.importing = getattr(main.__spec__, "name", None) or main.__file__


def _staged(stage, hear=False):
    """A wrapper that sets ``child.stage`` (``%s``: the first argument) while the wrapped step
    runs, left set if it fails; ``hear``: the first argument is the preparation data
    (:func:`hear_from_parent`)."""
    def wrap(original):
        @functools.wraps(original)
        def staged(arg, *args, **kwargs):
            if hear:
                hear_from_parent(arg)
            outer, child.stage = child.stage, stage % arg if "%s" in stage else stage
            try:
                result = original(arg, *args, **kwargs)
            except BaseException as exc:
                _drop_own_frames(exc)
                raise
            child.stage = outer
            return result
        return staged
    return wrap


# --- multiprocessing.forkserver ------------------------------------------------------------------

def _connect_to_new_process(original, module):
    @functools.wraps(original)
    def connect_to_new_process(fds):
        try:
            return original(fds)
        except (OSError, EOFError) as exc:
            server = getattr(module, "_forkserver", None)
            from mpcompat.child_failures.exits import forkserver_died
            forkserver_died(exc, getattr(server, "_forkserver_pid", None))
            _drop_own_frames(exc)
            raise
    return connect_to_new_process


def _apply_records(module):
    """Wrap ``BaseProcess.start``, ``join``, ``is_alive`` and ``_bootstrap``
    (``multiprocessing.process``),
    ``get_preparation_data``, ``prepare`` and the import of the main module (``spawn``) or
    ``connect_to_new_process`` (``forkserver``)."""
    if module.__name__ == "multiprocessing.forkserver":
        # popen_forkserver calls the module's alias of the one ForkServer's bound method.
        records_patcher.replace(module, "connect_to_new_process", _connect_to_new_process(
            records_patcher.original(module, "connect_to_new_process"), module))
        return
    if module.__name__ == "multiprocessing.process":
        cls = module.BaseProcess
        for name, wrap in (("start", _start), ("join", _join), ("is_alive", _is_alive),
                           ("_bootstrap", _bootstrap)):
            records_patcher.replace(cls, name, wrap(records_patcher.original(cls, name)))
        return
    for name, wrap in (("get_preparation_data", _get_preparation_data),
                       ("prepare", _staged("preparing to run what its parent sent", hear=True)),
                       ("_fixup_main_from_path", _staged(IMPORTING)),
                       ("_fixup_main_from_name", _staged(IMPORTING))):
        records_patcher.replace(module, name, wrap(records_patcher.original(module, name)))
    joined_late()  # mpcompat came with the child's import of its main module, maybe


# --- multiprocessing.pickling_notes -------------------------------------------------------------

pickling_patcher = Patcher()


def _report(exc, obj, pickler, protocol, where):
    try:
        from mpcompat.diagnose.notes import pickling_failed
        pickling_failed(exc, obj, pickler, protocol, where)
    except Exception:
        pass


def _wrap_dump(original, module):
    @functools.wraps(original)
    def dump(obj, file, protocol=None):
        start = file.tell() if type(file) is io.BytesIO else None
        try:
            result = original(obj, file, protocol)
        except Exception as exc:
            _report(exc, obj, module.ForkingPickler, protocol, "start")
            raise
        if start is not None and "_popen" in getattr(obj, "__dict__", ()):
            # A Process object for a spawn/forkserver start: its size (the DataLoader
            # dataset in its args) is read by mpcompat.workers.dataset_memory.
            obj.__dict__["_mpcompat_sent_bytes"] = file.tell() - start
        return result
    return dump


def _make_dumps(original, module):
    func = original.__func__
    name = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    if name == (module.__name__, "ForkingPickler.dumps") and not hasattr(func, "__wrapped__"):
        def dumps(cls, obj, protocol=None):
            buf = io.BytesIO()
            try:
                cls(buf, protocol).dump(obj)
            except Exception as exc:
                _report(exc, obj, cls, protocol, "send")
                raise
            return buf.getbuffer()
    else:
        def dumps(cls, obj, protocol=None):
            try:
                return func(cls, obj, protocol)
            except Exception as exc:
                _report(exc, obj, cls, protocol, "send")
                raise
    return classmethod(functools.wraps(func)(dumps))


def _apply_pickling(module):
    """Hook ``module.dump`` and ``module.ForkingPickler.dumps`` (``multiprocessing.reduction``)."""
    pickler = module.__dict__.get("ForkingPickler")
    if not callable(module.__dict__.get("dump")) or \
            not isinstance(getattr(pickler, "__dict__", {}).get("dumps"), classmethod):
        raise Skip("multiprocessing.reduction has no dump() or ForkingPickler.dumps")
    original = pickling_patcher.original
    pickling_patcher.replace(module, "dump", _wrap_dump(original(module, "dump"), module))
    pickling_patcher.replace(pickler, "dumps", _make_dumps(original(pickler, "dumps"), module))


# --- multiprocessing.bootstrap_notes ------------------------------------------------------------

bootstrap_patcher = Patcher()
hooks = ExceptHooks()


def _hooked(original, errors, on_error):
    """``original``, calling ``spawn_child.<on_error>(exc)`` for an error of type ``errors`` it
    raises; when that returns a string, it is printed instead of the traceback (nothing for
    ""), and the process exits with code 1; None: the error goes on."""
    @functools.wraps(original)
    def hooked(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except errors as exc:
            line = None
            try:
                from mpcompat.child_failures import spawn_child  # a failing child's main thread
                line = getattr(spawn_child, on_error)(exc)
            except Exception:
                pass
            if line is None:
                raise
        spawn_child.print_line(line)
        raise SystemExit(1)  # spawn_main exits with it; a forkserver child exits 1 in any case
    return hooked


def _apply_bootstrap(module):
    """Hook ``_check_not_importing_main`` and ``_main`` of ``module`` (``multiprocessing.spawn``);
    in a child that is starting up right now, also install the excepthook."""
    if not callable(module.__dict__.get("_check_not_importing_main")) or \
            not callable(module.__dict__.get("_main")):
        raise Skip("multiprocessing.spawn has no _check_not_importing_main() or _main()")
    for name, errors, on_error in (("_check_not_importing_main", RuntimeError,
                                    "main_guard_failed"),
                                   ("_main", Exception, "start_failed")):
        bootstrap_patcher.replace(module, name, _hooked(bootstrap_patcher.original(module, name),
                                                        errors, on_error))
    if getattr(module.process.current_process(), "_inheriting", False):
        from mpcompat.child_failures import spawn_child
        hooks.install(spawn_child.ExceptHook)


def _revert_bootstrap(module):
    """Put back the originals where ours are in place; turn the excepthook off (removed where
    it is still the one in place)."""
    bootstrap_patcher.restore(module)
    hooks.remove()


# --- multiprocessing.exit_evidence --------------------------------------------------------------

evidence_patcher = Patcher()
_WAITID = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")
_ENDED = os.WEXITED | os.WNOHANG | getattr(os, "WNOWAIT", 0) if _WAITID else 0
_evidence = []  # child_failures.channel, loaded by the first start


def _init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if not _evidence:  # the first start: the user's thread
            import resource  # noqa: F401  (os.wait4 imports it at its first call)
            from mpcompat.child_failures import channel
            _evidence.append(channel)
        evidence = _evidence[0]
        try:
            before = evidence.snapshot()
        except Exception:
            before = None
        try:
            original(self, *args, **kwargs)
        except BaseException as exc:
            _drop_own_frames(exc)
            raise
        evidence.started(self.pid, before)
    return __init__


def poll(self, flag=os.WNOHANG):
    """``popen_fork.Popen.poll``, reaping with ``os.wait4``: the exit code, or None."""
    if self.returncode is None:
        try:
            # Still running? Asked without reaping: a poll (each start polls every child)
            # builds no struct_rusage for a child that has not ended.
            if flag and _WAITID and os.waitid(os.P_PID, self.pid, _ENDED) is None:
                return None
            pid, status, rusage = os.wait4(self.pid, flag)
        except OSError:  # not created yet (CPython's poll says so too)
            return None
        if pid == self.pid:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _reaped(pid, code, rusage, "this process")
            self.returncode = code
    return self.returncode


def _forkserver_poll(original):
    @functools.wraps(original)
    def poll(self, *args, **kwargs):
        if self.returncode is not None:
            return self.returncode
        code = original(self, *args, **kwargs)
        if code is not None:
            _reaped(self.pid, code, None, "the forkserver")
        return code
    return poll


def _reaped(pid, code, rusage, reaper):
    if _evidence:  # else nothing was measured as it started
        try:
            _evidence[0].reaped(pid, code, rusage, reaper)
        except Exception:
            pass


def _apply_evidence(module):
    """Wrap ``Popen.__init__`` and replace ``Popen.poll`` (``multiprocessing.popen_fork``), or
    wrap the forkserver's ``Popen.poll``."""
    if not hasattr(os, "wait4"):
        raise NotNeeded("this system has no os.wait4")
    cls = module.Popen
    if module.__name__ == "multiprocessing.popen_forkserver":
        evidence_patcher.replace(cls, "poll",
                                 _forkserver_poll(evidence_patcher.original(cls, "poll")))
        return
    evidence_patcher.replace(cls, "__init__", _init(evidence_patcher.original(cls, "__init__")))
    evidence_patcher.replace(cls, "poll", poll)


# --- the table's impl of each patch ------------------------------------------------------------

# (Patcher.restore(module): put back what is still ours on that module.)
failure_records = SimpleNamespace(apply=_apply_records, revert=records_patcher.restore)
pickling_notes = SimpleNamespace(apply=_apply_pickling, revert=pickling_patcher.restore)
bootstrap_notes = SimpleNamespace(apply=_apply_bootstrap, revert=_revert_bootstrap)
exit_evidence = SimpleNamespace(apply=_apply_evidence, revert=evidence_patcher.restore)
