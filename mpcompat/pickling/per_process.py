"""``mpcompat.per_process(factory, *args, **kwargs)``: a handle each process opens for itself.

An lmdb environment, an h5py file, an open file, a socket, a database connection or a
``cv2.VideoCapture`` kept on a Dataset cannot travel to a spawn worker (it does not pickle), and
must not be shared with a fork worker (both processes would then use one handle). The object
returned here stands for ``factory(*args, **kwargs)`` and is created on first use, once in each
process (keyed by ``os.getpid()``):

- pickled, it travels as its recipe ``(factory, args, kwargs)``, never as the handle: the
  receiving process creates its own on first use;
- a fork child that inherited one its parent created creates its own on first use, and what
  happens to the inherited object is the ``on_fork`` rule (see :func:`per_process`).

It is a ``wrapt`` object proxy: attribute access, calls, ``with``, iteration, ``len``, ``bool``,
``isinstance``, operators, ``str`` all reach the object of this process, creating it first.
It is built on wrapt's pure-Python ``ObjectProxy``, not the C one: the C proxy keeps its target
in a C slot that no Python code can clear once it is set, so a fork child would go on using the
parent's handle; the pure-Python proxy reaches its target through ``self.__wrapped__`` on every
operation, which here is a property that checks the process (wrapt 2.0 to 2.5).
"""
import os
import pickle
import sys
import threading
import types

import wrapt.wrappers


__all__ = ["per_process", "close", "created", "PerProcess"]

KEEP, DROP, CLOSE = "keep", "drop", "close"
_RULES = (KEEP, DROP, CLOSE)
_EMPTY = (None, None)
_getpid = os.getpid
_get_ident = threading.get_ident

# Inherited objects this process keeps alive and never touches (the "keep" rule): a
# multiprocessing child ends with os._exit, so they are never finalized there.
_INHERITED_KEPT = []


def per_process(factory, /, *args, on_fork=None, **kwargs):
    """Return an object that behaves like ``factory(*args, **kwargs)``, made lazily per process.

    Nothing is created here: the first operation on the returned object in a process (an
    attribute, a call, ``with``, iteration, ``len``, ``bool``, ``isinstance``, ``str``...) calls
    ``factory(*args, **kwargs)`` in that process, once, also when several threads get there at
    the same time. ``repr`` shows the recipe and whether this process created its object, and
    creates nothing.

    Pickled, the object travels as ``(factory, args, kwargs)``: ``factory`` must be picklable
    (a module-level function or class) and so must the arguments (a path, not an open file);
    this is checked here, and a ``TypeError`` names what cannot be pickled. A class that pickle
    cannot find by its ``__module__`` (``lmdb.open``, lmdb's ``Environment``, says it lives in
    ``builtins``) travels as the name of the module it was found in.

    ``on_fork`` says what a fork child does with the object its parent created, when the child
    first uses the per-process object (or passes it to :func:`close`); a child that never uses
    it leaves the inherited object alone, even when the per-process object goes away there:

    - ``"keep"`` (default, except for lmdb): keep it alive and never touch it. Closing or even
      finalizing it in the child can act on the parent's resource: a file flushes the parent's
      buffered writes a second time, a database client may end the parent's session.
    - ``"close"`` (default for lmdb environments): call its ``close()`` (or ``release()``).
      py-lmdb refuses to open an environment that is already open in the process, and the
      inherited one counts; closing it in the child leaves the parent's usable.
    - ``"drop"``: forget it, so that Python finalizes it in the child as usual.
    - a callable: ``on_fork(inherited_object)``; it must pickle too.

    After ``"close"``, ``"drop"`` or a callable, nothing here refers to the inherited object any
    more. The rule travels with the pickle.

    ``on_fork`` is the only keyword argument that does not go to ``factory``; to pass one of
    that name, use ``functools.partial``. See also :func:`close` and :func:`created`.
    """
    _check_on_fork(on_fork)
    reference = _check_recipe(factory, args, kwargs, on_fork)
    return PerProcess(factory, reference, args, kwargs, on_fork)


def close(obj):
    """Close the object ``obj`` (a per-process object) created in this process, and forget it.

    Calls its ``close()`` method (or ``release()``, as ``cv2.VideoCapture`` has), if it has one.
    The next use in this process creates a new one. In a fork child whose object came from the
    parent, the ``on_fork`` rule is applied to the inherited object instead. Return whether this
    process had created one.
    """
    state = _take_state(obj)
    if state[0] is None:
        return False
    if state[0] != _getpid():
        _release_inherited(state[1], object.__getattribute__(obj, "_self_on_fork"))
        return False
    _close_handle(state[1])
    return True


def created(obj):
    """Return whether the per-process object ``obj`` has created its object in this process."""
    if type(obj) is not PerProcess:
        raise TypeError("mpcompat.per_process.created() takes an object made by "
                        "mpcompat.per_process(), not %s" % type(obj).__name__)
    return object.__getattribute__(obj, "_self_state")[0] == _getpid()


class PerProcess(wrapt.wrappers.ObjectProxy):
    """The object :func:`per_process` returns; see there."""

    # wrapt's lazy-proxy protocol: with a __wrapped_factory__, ObjectProxy.__init__(None) leaves
    # __wrapped__ unset. Ours is the __wrapped__ property, which creates per process.
    def __wrapped_factory__(self):
        return self.__wrapped__

    def __wrapped_get__(self):
        # ObjectProxy.__getattr__ calls this only if the __wrapped__ property raised
        # AttributeError, which it does only on an object whose __init__ did not run.
        raise RuntimeError("this mpcompat.per_process object was not initialized")

    def __init__(self, factory, reference, args, kwargs, on_fork):
        super(PerProcess, self).__init__(None)
        self._self_factory = factory
        self._self_reference = reference  # what pickles: the factory or its (module, name)
        self._self_args = args
        self._self_kwargs = kwargs
        self._self_on_fork = on_fork
        self._self_state = _EMPTY          # (pid that created it, the object)
        self._self_locks = {}              # pid -> threading.Lock; fresh in each process
        self._self_creating = None         # (pid, thread) running the factory

    @property
    def __wrapped__(self):
        state = object.__getattribute__(self, "_self_state")  # never falls back to __getattr__
        if state[0] == _getpid():
            return state[1]
        return self._self_create()

    @__wrapped__.setter
    def __wrapped__(self, value):
        raise TypeError("a mpcompat.per_process object makes its object with its factory; "
                        "use mpcompat.per_process.close() to make it create a new one")

    def _self_create(self):
        pid = _getpid()
        locks = self._self_locks
        lock = locks.get(pid)
        if lock is None:
            lock = locks.setdefault(pid, threading.Lock())
        if self._self_creating == (pid, _get_ident()):
            raise RuntimeError("mpcompat.per_process: the factory of %s uses the object it is "
                               "creating" % _recipe_text(self._self_reference, self._self_args,
                                                         self._self_kwargs))
        with lock:
            state = self._self_state
            if state[0] == pid:
                return state[1]
            self._self_creating = (pid, _get_ident())
            try:
                if state[0] is not None:  # made by the process this one was forked from
                    self._self_state = _EMPTY
                    _release_inherited(state[1], self._self_on_fork)
                obj = self._self_call_factory()
            finally:
                self._self_creating = None
            self._self_state = (pid, obj)
            return obj

    def _self_call_factory(self):
        try:
            return self._self_factory(*self._self_args, **self._self_kwargs)
        except AttributeError as exc:
            # Raised out of the __wrapped__ property, an AttributeError would make Python fall
            # back to __getattr__, and hasattr() on the proxy would answer False.
            raise RuntimeError("mpcompat.per_process: creating %s raised AttributeError: %s"
                               % (_recipe_text(self._self_reference, self._self_args,
                                               self._self_kwargs), exc)) from exc

    # Dunder methods wrapt's ObjectProxy leaves out (special methods are looked up on the type,
    # so they must be defined here; each one creates the object first).
    def __call__(self, /, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __iter__(self):
        return iter(self.__wrapped__)

    def __next__(self):
        return next(self.__wrapped__)

    def __repr__(self):
        try:
            state = object.__getattribute__(self, "_self_state")
            recipe = _recipe_text(self._self_reference, self._self_args, self._self_kwargs)
        except AttributeError:
            return "<mpcompat.per_process object (not initialized)>"
        pid = _getpid()
        if state[0] == pid:
            return "<mpcompat.per_process %s, created in this process (pid %d): %s>" % (
                recipe, pid, _safe_repr(state[1]))
        if state[0] is None:
            return "<mpcompat.per_process %s, not created in this process (pid %d)>" % (
                recipe, pid)
        return ("<mpcompat.per_process %s, not created in this process (pid %d); the one "
                "inherited from process %d is left alone>" % (recipe, pid, state[0]))

    def __reduce_ex__(self, protocol):
        args = (self._self_reference, self._self_args, self._self_kwargs)
        if self._self_on_fork is not None:
            args += (self._self_on_fork,)
        return rebuild_per_process, args

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __copy__(self):
        return PerProcess(self._self_factory, self._self_reference, self._self_args,
                          self._self_kwargs, self._self_on_fork)

    def __deepcopy__(self, memo):
        from copy import deepcopy
        args, kwargs = deepcopy((self._self_args, self._self_kwargs), memo)
        return PerProcess(self._self_factory, self._self_reference, args, kwargs,
                          self._self_on_fork)

    def __del__(self):
        # A fork child that never used this object leaves the inherited one alone: not even
        # finalized when the proxy goes away.
        try:
            state = object.__getattribute__(self, "_self_state")
            if state[0] is not None and state[0] != _getpid():
                _INHERITED_KEPT.append(state[1])
        except Exception:
            pass


def _take_state(obj):
    if type(obj) is not PerProcess:
        raise TypeError("mpcompat.per_process.close() takes an object made by "
                        "mpcompat.per_process(), not %s" % type(obj).__name__)
    pid = _getpid()
    lock = obj._self_locks.setdefault(pid, threading.Lock())
    with lock:
        state = obj._self_state
        obj._self_state = _EMPTY
    return state


def _release_inherited(inherited, rule):
    """Apply the ``on_fork`` rule to an object created by the process this one was forked from."""
    if rule is None:
        rule = CLOSE if _is_lmdb_environment(inherited) else KEEP
    if rule == KEEP:
        _INHERITED_KEPT.append(inherited)
    elif rule == CLOSE:
        _close_handle(inherited)
    elif rule != DROP:
        rule(inherited)


def _is_lmdb_environment(obj):
    lmdb = sys.modules.get("lmdb")
    environment = getattr(lmdb, "Environment", None)
    return isinstance(environment, type) and isinstance(obj, environment)


def _close_handle(obj):
    closer = getattr(obj, "close", None)
    if closer is None:
        closer = getattr(obj, "release", None)
    if closer is not None:
        closer()


def _check_on_fork(on_fork):
    if isinstance(on_fork, str):
        if on_fork in _RULES:
            return
    elif on_fork is None or callable(on_fork):
        return
    raise TypeError("mpcompat.per_process: on_fork must be %s, or a callable taking the "
                    "inherited object; got %r" % (", ".join(repr(r) for r in _RULES), on_fork))


def _check_recipe(factory, args, kwargs, on_fork):
    """Check that the recipe pickles; return what stands for ``factory`` in the pickle."""
    if not callable(factory):
        raise TypeError("mpcompat.per_process: the factory must be callable (a function or "
                        "class that makes the object), got %s" % _safe_repr(factory))
    reference = _factory_reference(factory)
    try:
        pickle.dumps((reference, args, kwargs, on_fork), pickle.HIGHEST_PROTOCOL)
        return reference
    except Exception as exc:
        label, value, error = "the recipe", (reference, args, kwargs, on_fork), exc
    parts = [("args[%d]" % i, a) for i, a in enumerate(args)]
    parts += [("kwargs[%r]" % key, v) for key, v in kwargs.items()]
    parts.append(("on_fork", on_fork))
    for part, part_value in parts:  # name the first part that does not pickle on its own
        try:
            pickle.dumps(part_value, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            label, value, error = part, part_value, exc
            break
    raise TypeError(
        "mpcompat.per_process(%s): %s (%s) cannot be pickled (%s: %s); the recipe travels to "
        "every process that receives this object, so pass what the factory needs to make the "
        "object (a path, not an open file)"
        % (_recipe_text(reference, args, kwargs), label, type(value).__name__,
           type(error).__name__, error)) from error


def _factory_reference(factory):
    """Return ``factory`` if it pickles, else the ``(module, name)`` it can be imported by."""
    try:
        pickle.dumps(factory, pickle.HIGHEST_PROTOCOL)
        return factory
    except Exception as exc:
        error = exc
    if isinstance(factory, (type, types.BuiltinFunctionType)):
        path = _import_path(factory)
        if path is not None:
            return path
    raise TypeError(
        "mpcompat.per_process: the factory %s cannot be pickled (%s: %s); it travels to every "
        "process that receives this object, so it must be a function or class defined at "
        "module level (not a lambda or a local function)"
        % (_safe_repr(factory), type(error).__name__, error)) from error


def _import_path(obj):
    """The ``(module, name)`` of a loaded module holding ``obj`` under its ``__name__``.

    For C types that report a wrong ``__module__`` (lmdb's ``Environment`` says ``builtins``):
    the module with the fewest dots, then the shortest name, wins (``lmdb``, not
    ``lmdb.cpython``). Only module dictionaries are read: no module ``__getattr__`` runs.
    """
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        return None
    found = []
    for module_name, module in list(sys.modules.items()):
        if module_name in ("__main__", "__mp_main__", "builtins") or module is None:
            continue
        try:
            if vars(module).get(name) is obj:
                found.append(module_name)
        except Exception:
            continue
    if not found:
        return None
    return min(found, key=lambda m: (m.count("."), len(m), m)), name


def resolve_reference(reference):
    """Return the factory a recipe names: ``reference`` itself, or the import of a
    ``(module, name)`` pair (see :func:`_import_path`)."""
    if type(reference) is not tuple:
        return reference
    from importlib import import_module
    module_name, name = reference
    factory = getattr(import_module(module_name), name)
    if not callable(factory):
        raise TypeError("mpcompat.per_process: %s.%s is not callable" % (module_name, name))
    return factory


def rebuild_per_process(factory, args, kwargs, on_fork=None):
    """Return a new :func:`mpcompat.per_process` object: the recipe only, created on first use.

    Pickles name it ``mpcompat.rebuild.rebuild_per_process`` (that module hands out this very
    function). ``factory`` is the callable, or a ``(module, name)`` pair of strings naming one
    that pickle cannot find by reference (``lmdb.open``); ``on_fork`` is in the pickle only when
    it is not the default. The recipe was checked where the object was made; here a ``(module,
    name)`` pair is imported, and the factory is not called (that happens on first use).
    """
    return rebuild(factory, args, kwargs, on_fork)


rebuild_per_process.__module__ = "mpcompat.rebuild"


def rebuild(reference, args, kwargs, on_fork=None):
    """The object a pickled recipe stands for (:func:`mpcompat.rebuild.rebuild_per_process`)."""
    _check_on_fork(on_fork)
    return PerProcess(resolve_reference(reference), reference, tuple(args), dict(kwargs),
                      on_fork)


def _recipe_text(reference, args, kwargs):
    if type(reference) is tuple:
        name = "%s.%s" % reference
    else:
        name = getattr(reference, "__qualname__", None) or getattr(reference, "__name__", None)
        module = getattr(reference, "__module__", None)
        if not isinstance(name, str):
            name = _safe_repr(reference)
        elif isinstance(module, str) and module not in ("builtins", "io"):
            name = "%s.%s" % (module, name)
    parts = [_safe_repr(a) for a in args]
    parts += ["%s=%s" % (key, _safe_repr(value)) for key, value in kwargs.items()]
    return "%s(%s)" % (name, ", ".join(parts))


_REPR = []


def _safe_repr(obj):
    if not _REPR:
        import reprlib
        short = reprlib.Repr()
        short.maxstring, short.maxother = 80, 120
        _REPR.append(short)
    try:
        return _REPR[0].repr(obj)
    except Exception:
        return "<%s object>" % type(obj).__name__


# mpcompat.per_process is this function; its helpers travel with it.
per_process.close = close
per_process.created = created
