"""``mpcompat.per_process(factory, *args, **kwargs)``: a handle each process opens for itself.

It is wrapt's pure-Python ``ObjectProxy``, not the C one: the C proxy keeps its target in a C
slot no Python code can clear, so a fork child would go on using the parent's handle; the
Python proxy reads ``self.__wrapped__`` on every operation, here a property that checks the
process (``os.getpid()``; wrapt 2.0 to 2.5).
"""
import os
import pickle
import reprlib
import sys
import threading
import types

import wrapt.wrappers


__all__ = ["per_process", "close", "created", "PerProcess"]

_RULES = ("keep", "drop", "close")
_NOT_BY_NAME = ("__main__", "__mp_main__", "builtins")  # modules _import_path never names
_EMPTY = (None, None)
_getpid = os.getpid

# Inherited objects this process keeps alive and never touches (the "keep" rule): a
# multiprocessing child ends with os._exit, so they are never finalized there.
_INHERITED_KEPT = []

_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring, _SHORT_REPR.maxother = 80, 120


def per_process(factory, /, *args, on_fork=None, **kwargs):
    """Return an object that behaves like ``factory(*args, **kwargs)``, made lazily per process.

    The first operation on it in a process calls the factory there, once, also when threads
    race to it; ``repr`` creates nothing. It pickles as ``(factory, args, kwargs)``, checked
    here; a class pickle cannot find by its ``__module__`` (lmdb's ``Environment``) travels as
    the name of the module it was found in.

    ``on_fork``: what a fork child does with the object its parent created, on its first use
    (or :func:`close`): ``"keep"`` it alive untouched (default: closing it can act on the
    parent's resource), ``"close"`` it (default for lmdb environments, which refuse a second
    open in one process), ``"drop"`` it for Python to finalize, or call ``on_fork(inherited)``.
    It is the one keyword argument not passed to ``factory``, and it travels with the pickle.
    """
    _check_on_fork(on_fork)
    reference = _check_recipe(factory, args, kwargs, on_fork)
    return PerProcess(factory, reference, args, kwargs, on_fork)


def close(obj):
    """Close (``close()`` or ``release()``) and forget the object ``obj`` created in this process.

    The next use creates a new one. In a fork child whose object came from the parent, the
    ``on_fork`` rule is applied instead. Return whether this process had created one.
    """
    _check_type(obj, "close")
    with obj._self_locks.setdefault(_getpid(), threading.Lock()):
        state = obj._self_state
        obj._self_state = _EMPTY
    if state[0] is None:
        return False
    if state[0] != _getpid():
        _release_inherited(state[1], obj._self_on_fork)
        return False
    _close_handle(state[1])
    return True


def created(obj):
    """Return whether the per-process object ``obj`` has created its object in this process."""
    _check_type(obj, "created")
    return obj._self_state[0] == _getpid()


def _check_type(obj, function):
    if type(obj) is not PerProcess:
        raise TypeError("mpcompat.per_process.%s() takes an object made by "
                        "mpcompat.per_process(), not %s" % (function, type(obj).__name__))


class PerProcess(wrapt.wrappers.ObjectProxy):
    """The object :func:`per_process` returns; see there."""

    # wrapt's lazy-proxy protocol: with a __wrapped_factory__, ObjectProxy.__init__(None) leaves
    # __wrapped__ (our property) alone.
    def __wrapped_factory__(self):
        return self.__wrapped__

    def __wrapped_get__(self):
        # Called only if the __wrapped__ property raised AttributeError: __init__ did not run.
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
        pid, thread = _getpid(), threading.get_ident()
        if self._self_creating == (pid, thread):
            raise RuntimeError("mpcompat.per_process: the factory of %s uses the object it is "
                               "creating" % _recipe_text(self._self_reference, self._self_args,
                                                         self._self_kwargs))
        with self._self_locks.setdefault(pid, threading.Lock()):
            state = self._self_state
            if state[0] == pid:
                return state[1]
            self._self_creating = (pid, thread)
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

    # A recipe can hold its own object (a factory that uses it): the inner one is "...",
    # not a recursion that Python 3.8 cannot always recover from.
    @reprlib.recursive_repr("<mpcompat.per_process ...>")
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
        text = "<mpcompat.per_process %s, not created in this process (pid %d)" % (recipe, pid)
        if state[0] is None:
            return text + ">"
        return text + "; the one inherited from process %d is left alone>" % state[0]

    def __reduce_ex__(self, protocol=2):
        args = (self._self_reference, self._self_args, self._self_kwargs)
        if self._self_on_fork is not None:
            args += (self._self_on_fork,)
        return rebuild_per_process, args

    __reduce__ = __reduce_ex__  # wrapt's proxy defines one that refuses

    def __deepcopy__(self, memo=None):  # a new recipe (deep: its arguments), never the object
        args, kwargs = self._self_args, self._self_kwargs
        if memo is not None:
            from copy import deepcopy
            args, kwargs = deepcopy((args, kwargs), memo)
        return PerProcess(self._self_factory, self._self_reference, args, kwargs,
                          self._self_on_fork)

    __copy__ = __deepcopy__

    def __del__(self):
        # A fork child that never used this object leaves the inherited one alone: not even
        # finalized when the proxy goes away.
        try:
            state = object.__getattribute__(self, "_self_state")
            if state[0] is not None and state[0] != _getpid():
                _INHERITED_KEPT.append(state[1])
        except Exception:
            pass


def _release_inherited(inherited, rule):
    """Apply the ``on_fork`` rule to an object created by the process this one was forked from."""
    if rule is None:
        environment = getattr(sys.modules.get("lmdb"), "Environment", None)
        lmdb = isinstance(environment, type) and isinstance(inherited, environment)
        rule = "close" if lmdb else "keep"
    if rule == "keep":
        _INHERITED_KEPT.append(inherited)
    elif rule == "close":
        _close_handle(inherited)
    elif rule != "drop":
        rule(inherited)


def _close_handle(obj):
    closer = getattr(obj, "close", None)
    if closer is None:
        closer = getattr(obj, "release", None)
    if closer is not None:
        closer()


def _check_on_fork(on_fork):
    if not (on_fork is None or callable(on_fork) or isinstance(on_fork, str) and on_fork in _RULES):
        raise TypeError("mpcompat.per_process: on_fork must be %s, or a callable taking the "
                        "inherited object; got %r" % (", ".join(map(repr, _RULES)), on_fork))


def _check_recipe(factory, args, kwargs, on_fork):
    """Check that the recipe pickles; return what stands for ``factory`` in the pickle."""
    if not callable(factory):
        raise TypeError("mpcompat.per_process: the factory must be callable (a function or "
                        "class that makes the object), got %s" % _safe_repr(factory))
    try:
        pickle.dumps(factory, pickle.HIGHEST_PROTOCOL)
        reference = factory
    except Exception as exc:
        reference = None
        if isinstance(factory, (type, types.BuiltinFunctionType)):
            reference = _import_path(factory)
        if reference is None:
            raise TypeError(
                "mpcompat.per_process: the factory %s cannot be pickled (%s: %s); it travels to "
                "every process that receives this object, so it must be a function or class "
                "defined at module level (not a lambda or a local function)"
                % (_safe_repr(factory), type(exc).__name__, exc)) from exc
    recipe = (reference, args, kwargs, on_fork)
    try:
        pickle.dumps(recipe, pickle.HIGHEST_PROTOCOL)
        return reference
    except Exception as exc:
        label, value, error = "the recipe", recipe, exc
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


def _import_path(obj):
    """The ``(module, name)`` of a loaded module holding ``obj`` under its ``__name__``, for C
    types with a wrong ``__module__``: the fewest dots, then the shortest name win (``lmdb``, not
    ``lmdb.cpython``). Only module dictionaries are read: no module ``__getattr__`` runs."""
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        return None
    found = []
    for module_name, module in list(sys.modules.items()):
        try:
            if module_name not in _NOT_BY_NAME and vars(module).get(name) is obj:
                found.append(module_name)
        except Exception:  # None, or no __dict__
            pass
    return (min(found, key=lambda m: (m.count("."), len(m), m)), name) if found else None


def rebuild_per_process(factory, args, kwargs, on_fork=None):
    """Return a new :func:`mpcompat.per_process` object from a pickled recipe (not created yet).

    Pickles name it ``mpcompat.rebuild.rebuild_per_process``. ``factory`` is the callable, or
    the ``(module, name)`` of one pickle cannot find by reference (``lmdb.open``); ``on_fork``
    is in the pickle only when it is not the default.
    """
    _check_on_fork(on_fork)
    reference = factory
    if type(reference) is tuple:
        from importlib import import_module
        module_name, name = reference
        factory = getattr(import_module(module_name), name)
        if not callable(factory):
            raise TypeError("mpcompat.per_process: %s.%s is not callable" % (module_name, name))
    return PerProcess(factory, reference, tuple(args), dict(kwargs), on_fork)


rebuild_per_process.__module__ = "mpcompat.rebuild"


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


def _safe_repr(obj):
    try:
        return _SHORT_REPR.repr(obj)
    except Exception:
        return "<%s object>" % type(obj).__name__


# mpcompat.per_process is this function; its helpers travel with it.
per_process.close = close
per_process.created = created
