"""Hints: what to do about an object that cannot be pickled.

Chosen by the object's type wherever possible (error texts differ between Python versions), by
the error text only where the type cannot tell. A library's types are recognised only once it
is imported: nothing here imports lmdb, h5py or torch.
"""
import re
import sys
import types

from mpcompat.diagnose.main_guard import MainReference

__all__ = ["hint_for", "type_name"]

# (A hint's prose lines are wrapped when shown: each paragraph is one line here.)
_PER_PROCESS = (
    "Create it with mpcompat.per_process, which behaves like the handle but opens it on first "
    "use, once in each process, and is pickled as the recipe to open it:\n"
    "\n"
    "    self.{attr} = mpcompat.per_process({factory})")

_LAZY_OPEN = """\
Or keep what is needed to open it (a path) and open it lazily yourself, once in each worker:

    class MyDataset(torch.utils.data.Dataset):
        def __init__(self, path):
            self.path = path
            self.{attr} = None  # opened on first use, in each worker

        def __getitem__(self, index):
            if self.{attr} is None:
                self.{attr} = {opener}
            ...

        def __getstate__(self):
            state = self.__dict__.copy()
            state["{attr}"] = None  # never pickle the open handle
            return state"""

_RECREATE = """\
Leave it out of the pickle and create a new one when the object is unpickled:

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["{attr}"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.{attr} = {factory}  # a new one, in the receiving process"""


def type_name(cls):
    """``cls`` as a report names it: ``module.QualName``, or the bare name for builtins."""
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls))
    return name if module in (None, "builtins") else "%s.%s" % (module, name)


def hint_for(obj, exc, path, culprit=None):
    """Return a hint for ``obj`` at ``path`` that failed to pickle with ``exc``, or None.
    culprit: the class (or callable) rebuilding ``obj`` when that is what cannot be pickled."""
    hint = _hint(obj, exc, path, culprit)
    method = path.rfind(".__self__")
    if method > 0:
        extra = ("It is reached through the bound method %s: pickling a bound method pickles "
                 "the object it is bound to. Pass a module-level function instead, or make "
                 "that object picklable." % path[:method])
        hint = extra if hint is None else hint + "\n" + extra
    return hint


def _hint(obj, exc, path, culprit):
    if isinstance(exc, MainReference):
        return exc.hint
    if culprit is not None:
        local = _local_hint(culprit, exc)
        if local is not None:
            return "It is an instance of %s. %s" % (type_name(culprit), local)
        return ("It is rebuilt by %s, which cannot be pickled by reference: %s"
                % (type_name(culprit), (str(exc).strip().splitlines() or [type(exc).__name__])[0]))
    if type(obj) is types.FunctionType or isinstance(obj, type):
        qualname = getattr(obj, "__qualname__", None)
        return _local_hint(obj, exc) or (
            "pickle refers to %s by name, as %s.%s, and that name does not lead back to this "
            "very object (it was replaced, decorated without functools.wraps, or created "
            "dynamically). Give it a stable module-level name, or call it from a module-level "
            "function." % (type_name(obj) if isinstance(obj, type) else qualname,
                           getattr(obj, "__module__", None), qualname))
    match = re.search(r"\.([A-Za-z_][A-Za-z0-9_]*)$", path)
    attr = match.group(1) if match else "handle"
    for check in (_resource_hint, _lock_hint, _type_hint, _view_or_module_hint,
                  _recursion_hint, _mp_hint):
        hint = check(obj, exc, attr)
        if hint is not None:
            return hint
    return ("%s has no pickle support. Leave it out of the pickled state (__getstate__) and "
            "recreate it after unpickling (__setstate__), or register a reducer with "
            "mpcompat.register(%s, reducer)." % (type_name(type(obj)), type(obj).__name__))


def _local_hint(obj, exc):
    qualname = getattr(obj, "__qualname__", "") or ""
    is_lambda = getattr(obj, "__name__", None) == "<lambda>"
    if "<locals>" not in qualname and "local object" not in str(exc):
        return ("A lambda has no name a child process could import it by. Define the "
                "function with def at module level; to bind values, use "
                "functools.partial(function, value).") if is_lambda else None
    outer = qualname.split(".<locals>")[0] if "<locals>" in qualname else "a function"
    if is_lambda:
        return ("A lambda defined inside %s: pickle can only refer to functions by their "
                "module-level name. Define it with def at module level, and bind values with "
                "functools.partial(function, value) instead of a closure." % outer)
    kind = "class" if isinstance(obj, type) else "function"
    return ("%s is a %s defined inside %s, and pickle refers to functions and classes by "
            "their module-level name. Move it to module level; to bind values, use "
            "functools.partial(module_level_function, value) instead of a closure."
            % (qualname, kind, outer))


def _isinstance(obj, module_name, *type_names):
    module = sys.modules.get(module_name)  # None: not imported, so obj is none of its types
    types_found = (getattr(module, name, None) for name in type_names)
    return isinstance(obj, tuple(t for t in types_found if isinstance(t, type)))


# Open handles: (module, its types or None for all of them, what it is, how to open it lazily,
# the arguments of mpcompat.per_process).
_RESOURCES = (
    ("io", ("IOBase",), "An open file is a handle of this process.", 'open(self.path, "rb")',
     'open, path, "rb"'),
    ("socket", ("socket",), "A socket is a connection of this process.",
     "socket.create_connection(self.address)", "socket.create_connection, address"),
    ("sqlite3", ("Connection", "Cursor"),
     "An sqlite3 connection belongs to the process that opened it.",
     "sqlite3.connect(self.path)", "sqlite3.connect, path"),
    ("lmdb", ("Environment", "Transaction", "Cursor", "_Database"),
     "An lmdb environment is an open handle, and lmdb forbids using one across processes.",
     "lmdb.open(self.path, readonly=True, lock=False, readahead=False)",
     "lmdb.open, path, readonly=True, lock=False"),
    ("h5py", None, "An h5py file, group or dataset is an open HDF5 handle.",
     'h5py.File(self.path, "r")', 'h5py.File, path, "r"'),
)


def _resource_hint(obj, exc, attr):
    for module, names, what, opener, factory in _RESOURCES:
        if (_isinstance(obj, module, *names) if names
                else type(obj).__module__.split(".")[0] == module):
            break
    else:
        return None
    return "\n\n".join([what + " " + _PER_PROCESS.format(attr=attr, factory=factory),
                      _LAZY_OPEN.format(attr=attr, opener=opener)])


def _lock_hint(obj, exc, attr):
    import threading
    import _thread
    cls = type(obj)
    queue = sys.modules.get("queue")
    sync = (threading.Event, threading.Condition, threading.Semaphore, threading.Barrier)
    if (cls in (_thread.LockType, _thread.RLock) or isinstance(obj, sync)
            or (queue is not None and isinstance(obj, queue.Queue))):
        factory = {"lock": "threading.Lock()", "RLock": "threading.RLock()"}.get(
            cls.__name__, "%s.%s()" % ("queue" if cls.__module__ == "queue" else "threading",
                                       cls.__name__))
        return ("Locks, conditions, events and queue.Queue objects belong to the threads of "
                "this process; a copy in another process could not be the same lock. "
                + _RECREATE.format(attr=attr, factory=factory)
                + "\n(To share one lock between processes, create a multiprocessing lock and "
                "pass it when the processes are created.)")
    return None


_ITERATE = (" Keep what it iterates over (a list, or the arguments that create it) and create the "
            "iterator where it is used, e.g. in __iter__ or __getitem__.")
# Hints by type, in order: (module, type names, text with {attr}); module None: any iterator.
_TYPE_HINTS = (
    ("threading", ("Thread",),
     "A thread cannot be sent to another process. Start a new thread in the receiving process "
     "instead (on first use, or in __setstate__). "
     + _RECREATE.format(attr="{attr}", factory="None  # start the thread on first use")),
    ("types", ("GeneratorType", "CoroutineType", "AsyncGeneratorType"),
     "A generator is a paused computation and cannot be pickled." + _ITERATE),
    (None, (), "An iterator keeps its position in something of this process." + _ITERATE),
    ("weakref", ("ref", "ProxyType", "CallableProxyType", "WeakValueDictionary",
                 "WeakKeyDictionary", "WeakSet", "finalize"),
     "Weak references cannot be pickled. Keep a normal reference, or leave the weak reference "
     "out in __getstate__ and rebuild it in __setstate__. "
     + _RECREATE.format(attr="{attr}", factory="weakref.ref(self.target)")),
    ("torch.jit", ("ScriptFunction", "ScriptModule"),
     "TorchScript functions and modules cannot be pickled. Send the plain Python function or "
     "nn.Module and call torch.jit.script on it in the worker, or save it with "
     "torch.jit.save(scripted, path), send the path and torch.jit.load(path) in the worker."),
    ("builtins", ("memoryview",),
     "A memoryview points into memory of this process. Send bytes(view), or the object it "
     "views (bytes, bytearray, a numpy array), instead."),
    ("ctypes", ("_Pointer", "_CFuncPtr", "_SimpleCData", "Structure", "Union", "Array"),
     "ctypes pointers and foreign functions are addresses in this process's memory. Send plain "
     "values, and load the library and build the pointers in the worker (lazily, or in "
     "worker_init_fn or a Pool initializer)."),
)


def _type_hint(obj, exc, attr):
    for module, names, text in _TYPE_HINTS:
        if (_isinstance(obj, module, *names) if module is not None
                else callable(getattr(type(obj), "__next__", None))):
            return text.format(attr=attr)
    return None


def _view_or_module_hint(obj, exc, attr):
    from mpcompat.activation import MODULE_TYPE, VIEW_REDUCERS
    import mpcompat
    active = mpcompat.is_active()
    if type(obj) in VIEW_REDUCERS:
        if active:
            return "Store list(view) instead."
        return ("Dict views (d.keys(), d.values(), d.items()) have no pickle support. "
                "import mpcompat (it activates reducers for them), or store list(view).")
    if type(obj) is MODULE_TYPE:
        if active:
            return ("Keep the values you need from the module, or import the module where it "
                    "is used.")
        return ("Module objects have no pickle support. import mpcompat (it pickles importable "
                "modules by name), or keep the values you need from the module instead.")
    return None


def _recursion_hint(obj, exc, attr):
    if not isinstance(exc, RecursionError):
        return None
    for klass in type(obj).__mro__:
        if "__getattr__" in klass.__dict__ and klass is not object:
            return ("%s.__getattr__ calls itself: pickle looks up methods such as "
                    "__getstate__ and __setstate__ on the object, also before its attributes "
                    "are set. Make __getattr__ raise AttributeError for names starting with "
                    "'__' and for names missing from self.__dict__ instead of looking them up "
                    "again." % type_name(klass))
    return ("The object is nested too deeply for pickle (or its reduction recurses): flatten "
            "it, or raise the recursion limit with sys.setrecursionlimit().")


def _mp_hint(obj, exc, attr):
    if not isinstance(exc, RuntimeError):
        return None
    if "fork context" in str(exc):
        return ("It was created from the fork context (e.g. multiprocessing.Lock() while the "
                "default start method is fork) and passed to a spawn or forkserver process. "
                "Create it from the context that starts the processes: "
                "ctx = multiprocessing.get_context(\"spawn\"); lock = ctx.Lock().")
    if "inheritance" not in str(exc):
        return None
    return ("multiprocessing locks, semaphores, events and queues can only be passed when a "
            "process is created (Process(args=...), Pool(initializer=..., initargs=...)), not "
            "in tasks sent to a running Pool or executor. Pass it through initargs, or use a "
            "multiprocessing.Manager() lock or queue, whose proxies can be sent anywhere.")

