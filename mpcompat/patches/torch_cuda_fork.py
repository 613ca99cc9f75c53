"""Patch ``torch.cuda_fork``: "Cannot re-initialize CUDA in forked subprocess" names where the
parent started CUDA, where the child touched it, where the child was forked, and the fix.

- The first start of CUDA in a process is observed at ``torch._C._cuda_init``, which
  ``torch.cuda._lazy_init`` looks up and calls once per process (every start goes through it,
  those made in C++ too: ``.cuda()``, ``torch.ones(device="cuda")``). The observer records the
  user's frame that caused it (and the line of a library, for a start hidden in one or in
  torch's DataLoader), puts torch's function back, registers :func:`_forked` with
  ``os.register_at_fork`` (once), and calls torch's function. Nothing runs before the start, and
  nothing after it.
- Every child forked after that start is in torch's "bad fork" state. :func:`_forked` runs in
  such a child, and only there: it puts :func:`_checking` in place of
  ``torch.cuda._is_in_bad_fork``, which ``_lazy_init`` calls just before it raises its error.
  The error gets the note as it is raised, in torch's own frame (:func:`_arm`): no frame of
  mpcompat is ever in its traceback. The note is made from the stack of the child (a fork child
  runs inside its parent's frames: its own frames, then ``Popen._launch`` with the process
  started, then the line that started it) and from the parent's record, inherited with its
  memory.
- Said once, in the parent: a DataLoader worker, a ``Process`` and a ``torch.multiprocessing``
  child send or print their error as text: the note is on the error (``add_note``). A Pool's or
  a ``ProcessPoolExecutor``'s task error is sent as the exception object, with its traceback as
  text: the note goes only with the object (:func:`rebuild_noted` adds it as the parent unpickles
  the error), so that the worker's traceback shown above it does not say it again.

Everything is imported with the patch (with torch): :func:`rebuild_noted` runs in a Pool's
result-handler thread, where nothing may be imported (the fork rule).
"""
import collections
import functools
import itertools
import os
import sys
import threading

from mpcompat.diagnose.notes import PREFIX, add_note
from mpcompat.patcher import NotNeeded, Patcher, Skip
from mpcompat.workers.user_frames import is_own

TARGET = "torch.cuda"
MESSAGE = "re-initialize CUDA in forked subprocess"  # torch 1.9-2.13, raised by _lazy_init only
_LIBRARY_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # mpcompat's files
_LAUNCH = os.sep + "multiprocessing" + os.sep + "popen_fork.py"

patcher = Patcher()
# active: applied (the fork hook acts only then); unhooked: the fork hook is still to be
# registered (popped: once per process tree); start: the first start of CUDA in this process,
# or the parent's, inherited: (pid, thread name or None, user frame, library frame), each frame
# (filename, line, function) or None; lazy_code: the code of torch's _lazy_init; bad_fork:
# torch's _is_in_bad_fork; torch: torch's directory.
_state = {"active": False, "unhooked": True, "start": None, "lazy_code": None,
          "bad_fork": None, "torch": None}

# (module, qualname) of a Process target -> what the child is; the fix is chosen by it.
_TARGETS = {
    ("torch.utils.data._utils.worker", "_worker_loop"): "dataloader",
    ("multiprocessing.pool", "worker"): "pool",
    ("concurrent.futures.process", "_process_worker"): "executor",
    ("torch.multiprocessing.spawn", "_wrap"): "torch",
}
_WHAT = {"dataloader": "DataLoader worker process", "pool": "Pool worker process",
         "executor": "ProcessPoolExecutor worker process",
         "torch": "torch.multiprocessing child process", "process": "child process",
         None: "forked process"}
_BY = {"dataloader": "the DataLoader's iterator starts its workers",
       "pool": "the Pool starts its workers",
       "executor": "the executor starts its workers as tasks are submitted",
       "torch": "torch.multiprocessing starts its processes", "process": "Process.start"}


def apply(module):
    """Observe ``torch._C._cuda_init`` (``module`` is ``torch.cuda``)."""
    if not hasattr(os, "register_at_fork"):
        raise NotNeeded("no fork on this platform")
    lazy_init, bad_fork = module.__dict__.get("_lazy_init"), module.__dict__.get(
        "_is_in_bad_fork")
    for _ in range(8):  # torch's own, under a wrapper put there first (torch.leftovers')
        lazy_init = getattr(lazy_init, "__wrapped__", lazy_init)
    code = getattr(lazy_init, "__code__", None)
    if code is None or not callable(bad_fork) or not {"_cuda_init", "_is_in_bad_fork"} <= set(
            code.co_names):
        raise Skip("torch.cuda._lazy_init() does not call _is_in_bad_fork() and "
                   "torch._C._cuda_init()")
    c_module, torch = sys.modules.get("torch._C"), sys.modules.get("torch")
    if not callable(getattr(c_module, "_cuda_init", None)):
        raise NotNeeded("torch %s is built without CUDA: CUDA never starts" % getattr(
            torch, "__version__", "?"))
    _state.update(torch=os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                  lazy_code=code, bad_fork=bad_fork, active=True)
    if not module.__dict__.get("_initialized"):
        patcher.replace(c_module, "_cuda_init",
                        _observing(patcher.original(c_module, "_cuda_init")), target=TARGET)
    elif _state["start"] is None:  # started before mpcompat was active: where is unknown
        _started((os.getpid(), None, None, None))


def revert(module):
    """Put torch's functions back; the fork hook stays registered, disarmed."""
    _state["active"] = False
    patcher.restore(module)


# --- the first start, in any process ------------------------------------------------------------

def _observing(original):
    """``torch._C._cuda_init``, observed: its first call records where CUDA starts, puts torch's
    function back, and calls it. Made of C callables (partial, deque.extend, chain, islice,
    iter): no frame of mpcompat is on the stack while torch's function runs, so an error of it
    (no driver, no GPU) shows torch's frames alone."""
    done = object()

    def first():
        try:
            patcher.restore(TARGET)  # torch's function is back: nothing to run from now on
            thread = threading.current_thread()
            _started((os.getpid(), None if thread is threading.main_thread() else thread.name)
                     + _find(sys._getframe(1)))  # the frame of _lazy_init (C frames between)
        except Exception:
            pass
        return done

    steps = itertools.chain(iter(first, done), itertools.islice(iter(original, done), 1))
    observer = functools.partial(collections.deque(maxlen=0).extend, steps)
    observer.__name__ = observer.__qualname__ = getattr(original, "__name__", "_cuda_init")
    observer.__wrapped__ = original
    return observer


def _started(start):
    _state["start"] = start
    if _state.pop("unhooked", False):
        os.register_at_fork(after_in_child=_forked)


def _where(filename):
    """What a frame's file is: "own" (mpcompat), "torch", "data" (torch.utils.data: a start
    hidden in the DataLoader), "stdlib", "library", "frozen" or "user" (kept per file name)."""
    where = _kinds.get(filename)
    if where is None:
        where = _kinds[filename] = _classify(filename)
    return where


_kinds = {}


def _classify(filename):
    if filename.startswith("<"):
        return "user" if filename in ("<string>", "<stdin>") else "frozen"
    if filename.startswith(_OWN) and is_own(filename):
        return "own"
    torch = _state["torch"]
    if torch and filename.startswith(torch):
        return "data" if filename.startswith(torch + "utils" + os.sep + "data") else "torch"
    if _LIBRARY_DIRS[0] in filename or _LIBRARY_DIRS[1] in filename:
        return "library"
    return "stdlib" if filename.startswith(_STDLIB) else "user"


def _find(frame, stop=None, hidden=("library", "data")):
    """From ``frame`` outward, up to ``stop`` (excluded): ``(user, inner)``: the first frame of
    the user's code, and the innermost frame before it of a library other than torch (or of
    torch's DataLoader: ``hidden``), each ``(filename, line, function)`` or None. Without a
    frame of the user's (a thread of a library), ``inner`` is at least the innermost frame
    outside torch.cuda and mpcompat."""
    inner = other = None
    cuda = (_state["torch"] or "\0") + "cuda" + os.sep
    while frame is not None and frame is not stop:
        code = frame.f_code
        where = _where(code.co_filename)
        entry = (code.co_filename, frame.f_lineno, code.co_name)
        if where == "user":
            return entry, inner
        if inner is None and where in hidden:
            inner = entry
        if other is None and where not in ("own", "frozen") and not \
                code.co_filename.startswith(cuda):
            other = entry
        frame = frame.f_back
    return None, inner or other


def _launch(frame):
    """The frame of ``Popen._launch`` of a fork start on the stack of a fork child, or None:
    the frames beyond it are the parent's, inherited with the fork."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_launch" and code.co_filename.endswith(_LAUNCH):
            return frame
        frame = frame.f_back
    return None


# --- in a child forked after the start -----------------------------------------------------------

def _forked():
    """``os.register_at_fork(after_in_child=...)``, registered as CUDA starts: this child is in
    torch's bad fork. One dict look-up and one replacement per child."""
    if not _state["active"]:
        return
    try:
        cuda = sys.modules.get(TARGET)
        original = _state["bad_fork"]
        if cuda is not None and cuda.__dict__.get("_is_in_bad_fork") is original:
            patcher.replace(cuda, "_is_in_bad_fork", _checking(original), target=TARGET)
    except Exception:
        pass


def _checking(original):
    """``torch.cuda._is_in_bad_fork`` in a fork child: torch's answer; when ``_lazy_init`` asks
    it right before raising its error, :func:`_arm` that frame first."""
    @functools.wraps(original)
    def _is_in_bad_fork():
        bad = original()
        if bad:
            try:
                caller = sys._getframe(1)
                if caller.f_code is _state["lazy_code"]:
                    _arm(caller)
            except Exception:
                pass
        return bad
    return _is_in_bad_fork


def _untraced(frame, event, arg):
    return None


def _arm(frame):
    """Note the error that torch's ``_lazy_init`` (``frame``) raises next, as it is raised: a
    trace function on that frame alone (``frame.f_trace``; the thread's tracing is on, new frames
    untraced) for its next event, then the thread's trace function is put back. This runs only
    in a child about to fail, and leaves no frame of mpcompat in the error's traceback."""
    previous = sys.gettrace()

    def on_event(traced, event, arg):
        if event == "exception" and isinstance(arg, tuple) and len(arg) == 3:
            _noted(arg[1], frame.f_back)
        if event in ("exception", "return"):
            frame.f_trace = None
            sys.settrace(previous)
            return None
        return on_event

    frame.f_trace_lines = False
    frame.f_trace = on_event
    sys.settrace(_untraced)


def _noted(exc, caller):
    """Note ``exc``, torch's error in this fork child, raised by ``_lazy_init`` called from
    ``caller`` (the frame that touched CUDA, or torch's on the way to it). Never raises."""
    try:
        if isinstance(exc, RuntimeError) and exc.args and MESSAGE in str(exc.args[0]):
            _note(exc, caller)
    except Exception:
        pass


def _note(exc, frame):
    launch = _launch(frame)
    touch, touch_inner = _find(frame, launch)
    kind, fork_site, fork_inner, thread = None, None, None, None
    if launch is not None:
        target = getattr(launch.f_locals.get("process_obj"), "_target", None)
        kind = _TARGETS.get((getattr(target, "__module__", None),
                             getattr(target, "__qualname__", None)), "process")
        fork_site, fork_inner = _find(launch.f_back, hidden=("library",))
        if fork_site is None:
            thread = threading.current_thread().name  # the thread that forked (e.g. a Pool's)
    what = _WHAT[kind]
    init_fn = kind == "dataloader" and touch is not None and _in_init_fn(frame, launch)
    lines = [PREFIX + "CUDA had started in the parent process before it forked this %s; a "
             "forked child cannot use CUDA." % what]
    lines += _start_lines(_state["start"])
    lines.append("  this %s touched CUDA%s: %s" % (
        "worker" if kind in ("dataloader", "pool", "executor") else "child",
        " in its worker_init_fn" if init_fn else "", _frame_text(touch, touch_inner, "in")))
    if fork_site is not None:
        lines.append("  it was forked by: %s" % _frame_text(fork_site, fork_inner,
                                                            suffix="  (%s)" % _BY[kind]))
    elif thread is not None:
        lines.append("  it was forked by the parent's thread %r (%s)" % (thread, _BY[kind]))
    lines.append(_fix(kind, touch, _state["start"], init_fn))
    note = "\n".join(lines)
    if kind in ("pool", "executor"):
        # Its traceback goes to the parent as text, shown above the error: the note goes with
        # the error object only, and is said once, at the end.
        exc.__reduce_ex__ = functools.partial(_reduce_noted, exc, note)
    else:
        add_note(exc, note)


def _in_init_fn(frame, launch):
    """Whether the DataLoader worker's ``worker_init_fn`` is running, outward of ``frame``."""
    codes = set()
    while frame is not None and frame is not launch:
        code = frame.f_code
        if code.co_name == "_worker_loop" and _where(code.co_filename) == "data":
            init_fn = frame.f_locals.get("init_fn")
            init_fn = getattr(init_fn, "func", init_fn)  # a functools.partial
            return getattr(init_fn, "__code__", None) in codes
        codes.add(code)
        frame = frame.f_back
    return False


def _start_lines(start):
    if start is None:
        return ["  the parent started CUDA: not seen by mpcompat (it started before mpcompat "
                "was active)"]
    pid, thread, user, inner = start
    if user is None and inner is None:
        return ["  the parent (pid %d) had started CUDA before mpcompat was active: where, "
                "mpcompat did not see" % pid]
    if user is None:
        return ["  the parent (pid %d) started CUDA in its thread %r, at %s (no line of yours "
                "on that thread's stack)" % (pid, thread, _frame_text(None, inner))]
    in_thread = " in its thread %r" % thread if thread else ""
    return ["  the parent (pid %d) started CUDA%s: %s" % (pid, in_thread,
                                                        _frame_text(user, inner))]


def _frame_text(entry, inner=None, function=None, suffix=""):
    """``file, line N[, in f]: source``, then the library line inside that call, if any."""
    if entry is None:
        return _frame_text(inner, function=True) if inner is not None else \
            "(no frame of yours)"
    filename, line, name = entry
    text = "%s, line %d%s: %s%s" % (filename, line, ", in %s" % name if function and name !=
                                    "<module>" else "", _source(filename, line), suffix)
    if inner is not None:
        text += "\n      inside that call, at %s, line %d, in %s: %s" % (
            inner[0], inner[1], inner[2], _source(inner[0], inner[1]))
    return text


def _source(filename, line):
    import linecache  # in the child, as its error is noted
    return linecache.getline(filename, line).strip() or "(source not available)"


def _fix(kind, touch, start, init_fn=False):
    before = ""
    if start is not None and start[2] is not None:
        before = " (before %s, line %d)" % (os.path.basename(start[2][0]), start[2][1])
    work = ("keep CUDA out of %s(): " % touch[2]) if touch is not None else \
        "keep CUDA out of the child: "
    if kind == "dataloader":
        work = ("keep torch.cuda out of worker_init_fn (%s()): the workers need no CUDA to make "
                "CPU tensors; " % touch[2]) if init_fn else work + "work on CPU tensors in the "\
            "workers and "
        return ('Fix: add multiprocessing_context="spawn" (or "forkserver") to that DataLoader'
                '(...): its workers then start CUDA themselves. Or %smove each batch to the GPU '
                "in the main process, after it arrives: batch = batch.cuda(non_blocking=True)."
                % work)
    if kind == "pool":
        return ("Fix: make the Pool before CUDA starts%s: workers forked before then may use "
                'CUDA. Or start its workers with spawn: multiprocessing.get_context("spawn")'
                '.Pool(...) (or "forkserver"). Or %ssend it CPU tensors and move the results to '
                "the GPU in the main process." % (before, work))
    if kind == "executor":
        return ('Fix: ProcessPoolExecutor(..., mp_context=multiprocessing.get_context("spawn"))'
                ' (or "forkserver"): its workers then start CUDA themselves. Or %ssend it CPU '
                "tensors and move the results to the GPU in the main process." % work)
    if kind == "torch":
        return ('Fix: pass start_method="spawn" to torch.multiprocessing.start_processes(...) '
                "(torch.multiprocessing.spawn() uses it).")
    if kind == "process":
        return ('Fix: start it with spawn: multiprocessing.get_context("spawn").Process(...) '
                '(or "forkserver"), or start it before CUDA starts%s.' % before)
    return ('Fix: start the child with the "spawn" or "forkserver" start method, or fork it '
            "before CUDA starts%s." % before)


def _reduce_noted(exc, note, protocol):
    state = {k: v for k, v in exc.__dict__.items() if k != "__reduce_ex__"}
    return rebuild_noted, (type(exc), exc.args, state, note)


def rebuild_noted(cls, args, state, note):
    """Unpickle the error of a Pool's or an executor's task in the parent, with its note: only
    exception classes (what :func:`_note` sends); never allowlist it for a restricted
    unpickler."""
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise TypeError("rebuild_noted() rebuilds exceptions only, not %r" % (cls,))
    exc = cls(*args)
    exc.__dict__.update(state)
    add_note(exc, note)
    return exc
