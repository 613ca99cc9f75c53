"""The Python stack of a worker at its native crash (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL),
told to its parent.

A parent that starts a child (:func:`prepare`) names, in the child's process object, the path
of its crash file but the pid: ``/dev/shm/mpcompat-crash-<parent pid>-<random>-`` (else in
multiprocessing's temporary directory). The child, as it starts (:func:`arm`), creates that file
with its pid and points ``faulthandler`` at it: a crash writes the stack into the file before
the process dies. A child that ends without crashing removes its file (:func:`disarm`); one
that ended otherwise without a stack (a signal, ``os._exit``) has its empty file removed when it
is joined (:func:`joined`); the parent removes a crash's file as it reads it
(:func:`crash_lines`), and those left when it exits.

A torchrun agent starts its ranks with ``subprocess``, not ``multiprocessing``: it puts the
path of their crash files but the pid in its environment (:func:`share_with_children`), and a
rank arms its file from there as mpcompat activates in it (:func:`arm_inherited`).

Handlers installed before are chained: faulthandler restores the handler it found and raises
the signal again. torch installs its own handlers in a DataLoader worker after this start (and
they chain to nothing): faulthandler is enabled again after them (:func:`_chain_after_torch`). A
program's own faulthandler (``PYTHONFAULTHANDLER``, ``-X faulthandler``, ``-X dev``,
``faulthandler.enable()`` inherited by a fork) is left writing where it writes: faulthandler has
one file, and the program asked for its dump there.

The parent's side runs in the helper threads of Pools and executors: it imports nothing.
"""
import atexit
import faulthandler
import os
import signal
import sys


KEY = "mpcompat_crash_file"  # in a child's process object's _config: its file's path but the pid
ENV = "MPCOMPAT_CRASH_FILES"  # the same, in the environment a torchrun agent gives its ranks
_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) |
          getattr(os, "O_CLOEXEC", 0))
# all_threads=False (the crashing thread's stack), and from 3.14 c_stack=False: the parent
# shows the Python stack; a C one is addresses. Positional: a keyword dict costs a fork child.
_ENABLE = (False,) if sys.version_info < (3, 14) else (False, False)
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY = (os.path.dirname(os.path.abspath(os.__file__)) + os.sep,)
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_TORCH_SIGNALS = "torch.utils.data._utils.signal_handling"
_MAX_FRAMES = 40
_TMPFS = "/dev/shm"
# Written (zeros) into each crash file as the child starts: a crash that comes when /dev/shm is
# full (the very SIGBUS of shared memory running out) still has room for its stack.
_RESERVED = bytes(8192)
_BOOTSTRAP = os.path.join("multiprocessing", "process.py")
_CRASH_SIGNALS = frozenset(getattr(signal, name).value for name in
                           ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL")
                           if hasattr(signal, name))


class _State(object):
    """``owner``: the pid that ``prefix`` (its children's crash files' path, but the pid)
    belongs to;
    ``armed``: (pid, fd, path) of this process's own crash file while faulthandler writes to
    it; ``user``: the program's own faulthandler was on as this child started."""
    owner = prefix = armed = None
    user = False


_state = _State()


# --- the parent side ---------------------------------------------------------------------------

def prepare(process):
    """Before ``process`` starts: name in it the path of its crash file, but its pid. Never
    raises."""
    try:
        process._config[KEY] = _prefix()
    except Exception:
        pass


def share_with_children():
    """In a parent whose children are not ``multiprocessing``'s (torchrun's agent): name the
    path of their crash files, but their pid, in ``os.environ``, which they inherit. Never
    raises."""
    try:
        os.environ[ENV] = _prefix()
    except Exception:
        pass


def _prefix():
    if _state.owner != os.getpid():
        _state.prefix, _state.owner = _new_prefix(), os.getpid()
    return _state.prefix


def _new_prefix():
    """This process's crash files' path, but the pid: in /dev/shm where it can be (a fresh
    worker creates its file there in about 20 us, on a disk in 150 us), else in
    multiprocessing's temporary directory; those left are removed when this process exits."""
    # The first start in this process: the user's thread (a Pool's or an executor's helper
    # threads only restart workers), so the import here is safe.
    from multiprocessing import util
    directory = _TMPFS if os.access(_TMPFS, os.W_OK) else util.get_temp_dir()
    util.Finalize(None, _remove_left, args=(os.getpid(),), exitpriority=-100)
    _remove_orphans(directory)
    # Files, not a directory of their own: a program that ends with os._exit() leaves nothing
    # when its workers ended well. The random part keeps others from guessing the names.
    return os.path.join(directory, "mpcompat-crash-%d-%s-" % (os.getpid(),
                                                              os.urandom(6).hex()))


def _path(pid):
    return _state.prefix + str(pid) if _state.owner == os.getpid() and _state.prefix else None


def files_left():
    """The paths of the crash files of this process's children still on disk."""
    if _state.owner != os.getpid() or not _state.prefix:
        return []
    directory, start = os.path.split(_state.prefix)
    try:
        return [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(start)]
    except OSError:
        return []


def _remove_orphans(directory):
    """Remove the crash files of parents that are gone: a parent killed by a signal could not
    remove its own (its children's files are all it leaves)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        owner = name.split("-")[2] if name.startswith("mpcompat-crash-") else ""
        if owner.isdigit() and not _alive(int(owner)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        pass
    return True


def _remove_left(owner):
    if owner == os.getpid():
        for path in files_left():
            try:
                os.unlink(path)
            except OSError:
                pass


def joined(pid, exitcode):
    """Child ``pid`` was joined and ended with ``exitcode``: if no crash signal ended it, remove
    the file it left (empty: a SIGKILL, SIGTERM or ``os._exit`` skips the child's own removal).
    Never raises."""
    try:
        if exitcode and -exitcode not in _CRASH_SIGNALS:
            os.unlink(_path(pid))
    except Exception:
        pass


def crash_lines(pid):
    """In a parent: the Python stack of its child ``pid`` at the native crash that killed it, as
    lines, the user's innermost frame named first ("It crashed in work() at job.py:12", then the
    stack), or [] when none was captured. Removes what it read. Never raises."""
    try:
        text = _take(_path(pid))
        if text is not None:
            return _stack_lines(text)
        if user_faulthandler_on():
            return ["faulthandler, on in this program, wrote its Python stack at the crash to "
                    "its stderr (above)."]
    except Exception:
        pass
    return []


def _take(path):
    """The text of the file at ``path``, which is then removed; None without one, or empty."""
    if not path:
        return None
    try:
        with open(path, "rb") as stream:
            if os.fstat(stream.fileno()).st_uid != os.getuid():
                return None  # not one of ours
            data = stream.read(200000)
    except OSError:
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    data = data.split(b"\0", 1)[0]  # the rest of the room reserved
    return data.decode("utf-8", "replace") if data.strip() else None


def _stack_lines(text):
    """Lines for a faulthandler dump: where the user's code crashed, then the stack without
    mpcompat's frames."""
    frames = [f for f in _frames(text) if not f[0].startswith(_OWN)]
    # The frames outside the process's own run(): how multiprocessing started it.
    frames = frames[:next((i for i, f in enumerate(frames) if f[2] == "_bootstrap" and
                           f[0].endswith(_BOOTSTRAP)), len(frames))]
    if not frames:
        return ["Its Python stack at the crash: no Python frame (the crash came in a thread "
                "that runs no Python code)."]
    path, line, name = next((f for f in frames if not _library(f[0])), frames[0])
    source = _source_line(path, line)
    lines = ["It crashed in %s() at %s:%s%s." % (name, path, line,
                                                ": `%s`" % source if source else "")]
    lines.append("Its Python stack at the crash (most recent call first, from faulthandler):")
    lines += ['  File "%s", line %s in %s' % f for f in frames[:_MAX_FRAMES]]
    if len(frames) > _MAX_FRAMES:
        lines.append("  ... (%d more frames)" % (len(frames) - _MAX_FRAMES))
    return lines


def _frames(text):
    """(path, line, function) of each frame of a faulthandler dump, innermost first."""
    frames = []
    for raw in text.splitlines():
        if not raw.startswith('  File "'):
            continue
        path, sep, rest = raw[len('  File "'):].rpartition('", line ')
        line, _, name = rest.partition(" in ")
        if sep:
            frames.append((path, line, name))
    return frames


def _library(path):
    return path.startswith(_LIBRARY) or path.startswith("<") or any(
        part in path for part in _LIBRARY_PARTS)


def _source_line(path, line):
    """The stripped text of line ``line`` of the file at ``path``, or ""."""
    try:
        number = int(line)
        with open(path, "rb") as stream:
            for index, raw in enumerate(stream, 1):
                if index == number:
                    return raw.decode("utf-8", "replace").strip()[:200]
    except (OSError, ValueError):
        pass
    return ""


def user_faulthandler_on():
    """Whether this program turned ``faulthandler`` on itself (``PYTHONFAULTHANDLER``,
    ``-X faulthandler``, ``-X dev``, ``faulthandler.enable()``): then its workers write their
    stack at a crash to their stderr, and no hint may tell the user to turn it on."""
    armed = _state.armed
    if armed is not None and armed[0] == os.getpid():
        return _state.user
    return faulthandler.is_enabled()


# --- the child side ----------------------------------------------------------------------------

def arm(process):
    """In a child as it starts (``process``: its process object): point faulthandler at its
    crash file, unless the program's own faulthandler is on. Never raises."""
    try:
        prefix = process._config.get(KEY)
        if prefix is not None:
            _arm(prefix)
    except Exception:
        pass


def arm_inherited():
    """In a process started by a parent that shared its crash files' path
    (:func:`share_with_children`: a torchrun rank): arm as :func:`arm` does; the file goes at
    exit. Never raises."""
    prefix = os.environ.get(ENV)
    if prefix:
        _arm(prefix)
        atexit.register(disarm)


def _arm(prefix):
    # One flat function: a fresh fork child pays a copy-on-write fault for each page it
    # first writes, object reference counts included, so every object touched here costs.
    try:
        pid = os.getpid()
        path = prefix + str(pid)
        armed = _state.armed  # a fork child inherits its parent's, and its descriptor
        if armed is None and faulthandler.is_enabled():
            _state.user = True
            if os.path.exists(path):
                os.unlink(path)  # a file another child with this pid left, unread
        else:
            try:
                fd = os.open(path, _FLAGS, 0o600)
            except FileExistsError:  # left by an earlier child with this pid, unread
                os.unlink(path)
                fd = os.open(path, _FLAGS, 0o600)
            os.pwrite(fd, _RESERVED, 0)  # the offset stays 0, where faulthandler writes
            faulthandler.enable(fd, *_ENABLE)
            _state.armed, _state.user = (pid, fd, path), False
            if armed is not None:
                os.close(armed[1])
        if _TORCH_SIGNALS in sys.modules:
            _chain_after_torch()
    except Exception:
        pass


def disarm():
    """In a child that ends without crashing: remove its crash file (faulthandler keeps the
    descriptor: closing it could let a later crash write into a file opened after). Never
    raises."""
    armed = _state.armed
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
        mine = _state.armed is not None and _state.armed[0] == os.getpid()
        if mine or _state.user:
            # disable() puts back the handlers faulthandler replaced: torch's must come after.
            faulthandler.disable()
        result = original(*args, **kwargs)
        if mine:
            faulthandler.enable(_state.armed[1], *_ENABLE)
        elif _state.user:
            # The program's own faulthandler, back (to stderr, its default: the file it was
            # given cannot be read back), where torch alone would leave it no signal.
            faulthandler.enable(file=2, all_threads=True)
        return result
    _set_worker_signal_handlers._mpcompat_chained = True
    module._set_worker_signal_handlers = _set_worker_signal_handlers


