"""Notes added to errors where they happen: in multiprocessing's pickling and bootstrapping.

The hooks (``pickling_notes``, ``bootstrap_notes``: ``mpcompat.patches.mp_children``) call in here only
after an error was raised; it keeps its type and gains a note. Paths start from names the user
passed: a Process's ``target``, ``args[i]``, ``kwargs[key]``; a DataLoader worker's ``dataset``
and ``collate_fn``; a task's function and arguments; the ``result`` a worker sends back.
"""
import os
import sys
import threading

PREFIX = "mpcompat: "
_MARK = "_mpcompat_noted"
_REPORT = "_mpcompat_explanation"
_busy = threading.local()

# Process attributes multiprocessing sets itself (3.8-3.13); others come from subclasses.
_PROCESS_ATTRS = frozenset([
    "_identity", "_config", "_parent_pid", "_parent_name", "_popen", "_closed", "_target",
    "_args", "_kwargs", "_name", "_start_method"])

# (module, qualname) of library targets -> (what the process is, parameter renames)
_KNOWN_TARGETS = {
    ("torch.utils.data._utils.worker", "_worker_loop"):
        ("DataLoader worker process", {"init_fn": "worker_init_fn"}),
    ("torch.multiprocessing.spawn", "_wrap"): ("torch.multiprocessing.spawn process", {}),
    ("multiprocessing.pool", "worker"): ("Pool worker process", {}),
    ("concurrent.futures.process", "_process_worker"):
        ("ProcessPoolExecutor worker process", {}),
}
# Arguments of library targets that are plumbing, not user objects.
_PLUMBING = frozenset(["dataset_kind", "index_queue", "data_queue", "done_event",
                       "auto_collation", "drop_last", "base_seed", "worker_id", "num_workers",
                       "persistent_workers", "shared_seed", "i", "error_file", "error_queue",
                       "inqueue", "outqueue", "maxtasks", "wrap_exception", "call_queue",
                       "result_queue", "max_tasks"])
_LIBRARY_MODULES = ("multiprocessing.", "concurrent.futures.", "torch.")


def add_note(exc, text):
    """Add ``text`` to ``exc`` without changing its type: ``exc.add_note`` on Python 3.11+; on
    3.8-3.10 ``text`` joins ``exc.__notes__`` and, when the message comes straight from one
    string argument (the default ``__str__``), that message, so that tracebacks show it."""
    if sys.version_info >= (3, 11):
        exc.add_note(text)
        return
    notes = exc.__dict__.get("__notes__")
    if not isinstance(notes, list):
        notes = exc.__notes__ = []
    notes.append(text)
    # Judged by what str() does, not by who defines __str__ (3.10's AttributeError does, and
    # still shows its one argument as it is).
    args = exc.args
    try:
        if len(args) <= 1 and (not args or isinstance(args[0], str)) and \
                str(exc) == (args[0] if args else ""):
            exc.args = ((args[0] + "\n" if args else "") + text,)
            if str(exc) != exc.args[0]:
                exc.args = args
    except Exception:
        exc.args = args


def own_message(exc):
    """``str(exc)`` without its notes (on 3.8-3.10 :func:`add_note` appends them to it)."""
    text = str(exc)
    for note in getattr(exc, "__notes__", None) or ():
        if isinstance(note, str):
            text = text.replace("\n" + note, "").replace(note, "")
    return text


def notes_of(exc):
    """Return the notes mpcompat added to ``exc`` (a list of strings, maybe empty)."""
    return [n for n in (getattr(exc, "__notes__", None) or ())
            if isinstance(n, str) and n.startswith(PREFIX)]


def one_line(exc):
    """``exc`` on one line: its type, the first paragraph of its own message, and the first
    sentence of its first mpcompat note (the cause, where mpcompat knows it)."""
    text = " ".join(own_message(exc).strip().split("\n\n", 1)[0].split())
    line = "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__
    notes = notes_of(exc)
    if notes:
        line += " (%s)" % cause_of(notes[0])
    return line


def cause_of(note):
    """The first sentence of an mpcompat ``note``: the cause (and the fix, where known)."""
    text = note[len(PREFIX):] if note.startswith(PREFIX) else note
    return text.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(".:")


def start_failure_line(exc, where=None):
    """The one line a child whose start-up error ``exc`` nobody else reports prints instead of
    a traceback: the error and its cause (``where``: the line that raised, if any)."""
    at = " at %s" % where if where else ""
    return "%sthis process (pid %d) failed while starting: %s%s\n" % (
        PREFIX, os.getpid(), one_line(exc), at)


# CPython's texts of the start-up errors that starting another worker cannot fix.
_CANNOT_PASS = ("finished its bootstrapping phase", "on <module '__main__'",
                "on <module '__mp_main__'", "module '__main__' has no attribute",
                "module '__mp_main__' has no attribute")


def explanation_of(exc):
    """The :class:`~mpcompat.diagnose.Explanation` of the pickling note on ``exc``, or None."""
    return getattr(getattr(exc, "__dict__", {}).get(_REPORT), "value", None)


class _Kept(object):
    """A value kept on an exception for this process only: pickled as None, so that the
    explanation (which holds what it explains) never stops the exception pickling."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return type(None), ()


def _first_note(exc):
    """Mark ``exc`` as noted by mpcompat; False when it already was."""
    if exc.__dict__.get(_MARK):
        return False
    exc.__dict__[_MARK] = True
    return True


def pickling_failed(exc, obj, pickler, protocol, where):
    """Add a note explaining ``obj`` to ``exc``, raised while pickling it with ``pickler``;
    where: ``"start"`` (a process object sent to a new process) or ``"send"`` (a task or
    message). Never raises."""
    if getattr(_busy, "active", False):
        return
    _busy.active = True
    try:
        if _first_note(exc):
            header, parts, name = _describe(obj, where)
            _note_parts(exc, header, parts, name, pickler, protocol, obj)
    except Exception:
        pass
    finally:
        _busy.active = False


def parts_failed(exc, header, parts, name):
    """Add a note to ``exc`` (raised by something that pickles ``parts``, a ``[(path,
    object)]`` list rooted at ``name``) on what cannot be pickled, under ``header``; False when
    all of it pickles. Never raises."""
    try:
        if not _first_note(exc):
            return True
        return _note_parts(exc, header, parts, name, None, None, None, probe=True)
    except Exception:
        return False


def _note_parts(exc, header, parts, name, pickler, protocol, whole, probe=False):
    from mpcompat.diagnose.walker import explain_parts
    report = explain_parts(parts, name=name, pickler=pickler, protocol=protocol,
                           error=None if probe else exc, check_main=False, whole=whole)
    if report.ok:
        return False
    exc.__dict__[_REPORT] = _Kept(report)
    # The error line of a part that fails as the whole did would repeat the message just above
    # the note (and, from 3.14, CPython's own "when serializing" notes).
    known = "%s: %s" % (type(exc).__name__, own_message(exc))
    add_note(exc, PREFIX + report.format(header + " What cannot be pickled, and why:",
                                         known=known))
    return True


def _describe(obj, where):
    """Return ``(header, parts, name)`` for the object a hook failed to pickle."""
    mp_process = sys.modules.get("multiprocessing.process")
    if where == "start" and mp_process is not None and isinstance(obj, mp_process.BaseProcess):
        return _describe_process(obj)
    task = (_describe_task(obj) or _describe_result(obj)) if where == "send" else None
    if task is not None:
        return task
    what = ("the data for a new process" if where == "start" else
            "an object sent to another process (a multiprocessing Queue, Pipe or Manager)")
    return ("Pickling %s failed." % what, [("obj", obj)], "obj")


def _call_parts(func_name, func, args, kwargs, kwargs_name="kwargs"):
    return ([(func_name, func)] + [("args[%d]" % i, a) for i, a in enumerate(args)]
            + [("%s[%r]" % (kwargs_name, k), v) for k, v in kwargs.items()])


def _chunk_parts(func_name, func, chunk):
    return [(func_name, func)] + [("chunk[%d]" % j, item) for j, item in enumerate(chunk)]


def _describe_process(process):
    state = process.__dict__
    target = state.get("_target")
    args, kwargs = tuple(state.get("_args") or ()), dict(state.get("_kwargs") or {})
    context = sys.modules.get("multiprocessing.context")
    method = getattr(context.get_spawning_popen() if context is not None else None, "method",
                     None)
    kind, renames = "Process %r" % (state.get("_name"),), None
    known = _KNOWN_TARGETS.get((getattr(target, "__module__", None),
                                getattr(target, "__qualname__", None)))
    if known is not None:
        kind, renames = known
    elif (getattr(target, "__module__", None) or "").startswith(_LIBRARY_MODULES):
        kind, renames = "%s process" % target.__qualname__, {}
    parts, bound = [("type(process)", type(process))], None
    if renames is not None:  # a library target: name its arguments by its parameters
        try:
            import inspect
            bound = dict(inspect.signature(target).bind(*args, **kwargs).arguments)
        except Exception:
            pass
    if bound is not None:
        if known is not None and target.__qualname__ == "_wrap" and "i" in bound:
            kind = "%s %s" % (kind, bound["i"])
        if "worker_id" in bound:
            kind = "%s %s" % (kind, bound["worker_id"])
        holder = bound.get("dataset_holder")  # torch 2.14 passes [dataset]
        if isinstance(holder, list) and len(holder) == 1:
            bound = dict(("dataset", holder[0]) if p == "dataset_holder" else (p, v)
                         for p, v in bound.items())
        parts += [(renames.get(p, p), v) for p, v in bound.items() if p not in _PLUMBING]
    else:
        parts += _call_parts("target", target, args, kwargs)
    parts += [("process.%s" % k, v) for k, v in state.items() if k not in _PROCESS_ATTRS]
    header = ("%s could not be started%s: pickling it for the new process failed."
              % (kind, " (start method %r)" % method if method else ""))
    return header, parts, "process"


def _pool_task():
    """In a Pool worker, the function of the task it runs; else None."""
    patch = sys.modules.get("mpcompat.patches.mp_pool_workers")
    return patch.current.func if patch is not None else None


def _pool_map(func):
    """Whether ``func`` is the function of a Pool task that carries a chunk of a map."""
    pool = sys.modules.get("multiprocessing.pool")
    return pool is not None and func in (getattr(pool, "mapstar", None),
                                         getattr(pool, "starmapstar", None))


def _failed(what, where, detail=""):
    return "%s could not be sent %s: pickling it failed%s." % (what, where, detail)


_WORKERS, _BACK = "to the worker processes", "back to the main process"


def _describe_task(obj):
    """Pool tasks and ProcessPoolExecutor call items; None for anything else."""
    cls = type(obj)
    if cls is tuple and len(obj) == 5 and type(obj[0]) is int and type(obj[3]) is tuple \
            and type(obj[4]) is dict:
        job, index, func, args, kwds = obj
        if _pool_map(func) and len(args) == 1 and type(args[0]) is tuple and len(args[0]) == 2:
            return (_failed("Task %s of a Pool map" % (index,), _WORKERS, " (chunk[j] is item j "
                            "of the chunk of the iterable this task carries)"),
                    _chunk_parts("func", *args[0]), "task")
        return (_failed("A task", "to the Pool's worker processes"),
                _call_parts("func", func, args, kwds, "kwds"), "task")
    if cls.__name__ == "_CallItem" and cls.__module__ == "concurrent.futures.process":
        state = obj.__dict__
        fn, args = state.get("fn"), tuple(state.get("args") or ())
        chunked = getattr(fn, "func", None)
        if getattr(chunked, "__name__", None) == "_process_chunk" and len(fn.args) == 1 \
                and len(args) == 1 and type(args[0]) is tuple:
            return (_failed("A task of ProcessPoolExecutor.map", _WORKERS, " (chunk[j] holds "
                            "the arguments of call j of this task's chunk)"),
                    _chunk_parts("fn", fn.args[0], args[0]), "task")
        return (_failed("A task", "to the ProcessPoolExecutor's worker processes"),
                _call_parts("fn", fn, args, dict(state.get("kwargs") or {})), "task")
    return None


def _describe_result(obj):
    """Results sent back by Pool and ProcessPoolExecutor workers; None for anything else."""
    cls = type(obj)
    if cls.__name__ == "_ResultItem" and cls.__module__ == "concurrent.futures.process":
        exception = obj.__dict__.get("exception")
        success = exception is None
        value = obj.__dict__.get("result") if success else exception
        chunk = success and _executor_chunked() and (
            "The result of a task of ProcessPoolExecutor.map", "of call j of this task's chunk")
    elif cls is tuple and len(obj) == 3 and type(obj[0]) is int and type(obj[1]) is int \
            and type(obj[2]) is tuple and len(obj[2]) == 2 and type(obj[2][0]) is bool \
            and _pool_task() is not None:  # else not sent by a Pool worker: any tuple
        success, value = obj[2]
        chunk = success and _pool_map(_pool_task()) and (
            "The result of task %d of a Pool map" % (obj[1],),
            "for item j of the chunk of the iterable this task carried")
    else:
        return None
    if not success:
        return (_failed("The exception raised by a task", _BACK),
                [("exception", getattr(value, "exc", value))], "result")
    header = (_failed(chunk[0], _BACK, " (result[j] is the result %s)" % chunk[1]) if chunk
              else _failed("The result of a task", _BACK))
    return header, [("result", value)], "result"


def _executor_chunked():
    """Whether a ProcessPoolExecutor worker is sending back a chunk of ``map()``."""
    # A frame read: no patch of the executor's worker says which call it runs (none on 3.8).
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_process_worker" and \
                frame.f_globals.get("__name__") == "concurrent.futures.process":
            fn = getattr(getattr(frame.f_locals.get("call_item"), "fn", None), "func", None)
            return getattr(fn, "__name__", None) == "_process_chunk"
        frame = frame.f_back
    return False


def note_missing_attribute(exc):
    """In a child process: add to ``exc`` the note of ``main_guard.explain_missing_attribute``
    and return it, or None. Never raises."""
    try:
        from mpcompat.diagnose.main_guard import explain_missing_attribute
        found = explain_missing_attribute(exc)
        if not found:
            return None
        note = PREFIX + found
        if note not in notes_of(exc):
            add_note(exc, note)
        return note
    except Exception:
        return None


def bootstrap_failed(exc):
    """Add the main-guard note to the "bootstrapping phase" RuntimeError. Never raises."""
    try:
        note = _bootstrap_note() if _first_note(exc) else None
        if note:
            add_note(exc, note)
    except Exception:
        pass


def _bootstrap_note():
    import linecache
    import textwrap
    # A frame read: the script's line that starts the process is in no state of multiprocessing.
    frames, outside, frame = {"__main__": [], "__mp_main__": []}, None, sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name in frames:
            if not frame.f_code.co_filename.startswith("<"):
                frames[name].append(frame)
        elif outside is None and not (name or "").startswith(("multiprocessing", "mpcompat")):
            outside = frame
        frame = frame.f_back
    # In a spawn child the main module runs as __mp_main__ (under the child's own __main__).
    main_frames = frames["__mp_main__"] or frames["__main__"]
    if not main_frames and outside is None:
        return None
    top = main_frames[-1] if main_frames else outside
    filename, line = top.f_code.co_filename, top.f_lineno
    source = linecache.getline(filename, line).strip() or "..."
    lines = [PREFIX + "%s, line %d starts a new process while this process is still importing "
             "the main module to start up: put it under `if __name__ == \"__main__\":`"
             % (filename, line),
             "", "    %d | %s" % (line, source)]
    if main_frames and main_frames[0] is not top:
        inner = main_frames[0]
        lines.append("    (the process is started in %s(), line %d)" % (
            inner.f_code.co_name, inner.f_lineno))
    # The fix is said once, above; here it is shown.
    lines += [""] + textwrap.wrap(
        "Under spawn and forkserver, every child process imports the main module again (as "
        "__mp_main__), so code at module level runs again in each child, and this line tries "
        "to start yet another process there. Guarded, %s reads:" % os.path.basename(filename),
        92)
    lines += ["", '    if __name__ == "__main__":', "        " + source]
    return "\n".join(lines)
