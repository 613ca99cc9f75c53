"""``explain(obj)``: which parts of an object cannot be pickled, where they sit, and why.

The walk follows the object the way pickle does: containers item by item, everything else
through its reduction (copyreg's ``dispatch_table``, then ``__reduce_ex__``), so ``__getstate__``,
``__slots__``, copyreg reducers and mpcompat's own reducers are all respected.

It is built for large objects. The whole object is pickled first; only if that fails does the
walk start, and at every level each subtree is pickled whole before the walk goes into it.
Big containers are split in halves, and a half is known to fail without pickling it when its
sibling pickles, so one offender among 30,000 entries costs a few pickles of the whole.
"""
import collections
import copyreg
import functools
import io
import pickle
import sys
import types

from mpcompat.diagnose.names import MainReference, type_name as _type_name

__all__ = ["explain", "assert_picklable", "Explanation", "Problem"]

DEFAULT_LIMIT = 10
# Deeper than this the walk stops and reports the subtree as a whole.
_MAX_DEPTH = 60
# Groups bigger than this are split in halves instead of pickled item by item.
_GROUP = 8
_REPR_MAX = 60

_ATOMIC = frozenset([type(None), bool, int, float, complex, str, bytes, bytearray, range,
                     type(Ellipsis), type(NotImplemented)])
_SEQUENCES = (list, tuple)
_SETS = (set, frozenset)
_MAIN_NAMES = ("__main__", "__mp_main__")


class Problem(object):
    """One part of the object that cannot be pickled.

    path: where it sits, as Python would reach it (``loader.dataset.transforms[3].fh``).
    type: its type (a class). error: the pickling error, ``"TypeError: cannot pickle ..."``.
    hint: what to do about it (may span several lines), or None. exception: the exception.
    what: a short description of the object (``"function 'make.<locals>.<lambda>'"``).
    """

    __slots__ = ("path", "type", "error", "hint", "exception", "what")

    def __init__(self, path, type, error, hint, exception, what):
        self.path, self.type, self.error = path, type, error
        self.hint, self.exception, self.what = hint, exception, what

    def format(self, indent="  ", known=None):
        """Return the problem as indented lines of text; the error line is left out when it
        is ``known`` (the message of the exception the report is a note of)."""
        lines = ["%s%s  (%s)" % (indent, self.path, self.what)]
        if self.error != known:
            lines.append("%s    error: %s" % (indent, self.error))
        if self.hint:
            hint_lines = _wrap(self.hint, 88 - len(indent))
            lines.append("%s    hint:  %s" % (indent, hint_lines[0]))
            lines.extend(("%s           %s" % (indent, line)).rstrip() for line in hint_lines[1:])
        return "\n".join(lines)

    def __str__(self):
        return self.format(indent="")

    def __repr__(self):
        return "Problem(path=%r, type=%s, error=%r)" % (self.path, _type_name(self.type),
                                                       self.error)


class Explanation(object):
    """What :func:`explain` found; ``str()`` gives a readable report.

    name: the name the paths start from. ok: whether the object pickles (and, when ``__main__``
    cannot be imported by child processes, refers to nothing defined there). problems: a list
    of :class:`Problem`. truncated: the walk stopped at the limit. error: the error of pickling
    the whole object (None when ok).
    """

    def __init__(self, name, problems, error=None, truncated=False):
        self.name = name
        self.problems = problems
        self.error = error
        self.truncated = truncated
        self.ok = not problems

    def format(self, header=None, known=None):
        """Return the report as text; ``header`` replaces its first line. ``known``: the
        error the reader has just read (see :meth:`Problem.format`)."""
        if self.ok:
            return header or "%s can be pickled." % self.name
        count = len(self.problems)
        first = header or "%s cannot be pickled: %d problem%s found." % (
            self.name, count, "" if count == 1 else "s")
        lines = _wrap(first, 92)
        for problem in self.problems:
            lines.append(problem.format(known=known))
        if self.truncated:
            lines.append("  (stopped after %d problems; there may be more: "
                         "explain(..., limit=N) looks further)" % count)
        return "\n".join(lines)

    def __str__(self):
        return self.format()

    def __repr__(self):
        return "<Explanation %s: %s>" % (
            self.name, "ok" if self.ok else "%d problem(s) at %s" % (
                len(self.problems), ", ".join(p.path for p in self.problems)))


def explain(obj, name="obj", limit=DEFAULT_LIMIT, protocol=None):
    """Explain why ``obj`` cannot be pickled (by the standard pickler with copyreg's table).

    Returns an :class:`Explanation`: ``.ok``, ``.problems`` (each with ``.path``, ``.type``,
    ``.error`` and ``.hint``) and a readable ``str()``. Paths start at ``name`` and read like
    Python: ``name.attr``, ``name['key']``, ``name[3]``. At most ``limit`` problems are listed.
    An object that pickles is checked in one ``pickle.dumps``.
    """
    return explain_parts([(name, obj)], name=name, limit=limit, protocol=protocol)


def assert_picklable(obj, name="obj", limit=DEFAULT_LIMIT, protocol=None):
    """Raise ``AssertionError`` with the :func:`explain` report if ``obj`` cannot be pickled."""
    report = explain(obj, name=name, limit=limit, protocol=protocol)
    if not report.ok:
        raise AssertionError(str(report))


def explain_parts(parts, name="obj", limit=DEFAULT_LIMIT, protocol=None, pickler=None,
                  error=None, check_main=None, whole=None):
    """Explain a list of ``(path, object)`` parts that are pickled together.

    pickler: a Pickler class to pickle with (e.g. multiprocessing's ForkingPickler, whose extra
    reducers then count); None for ``pickle.dumps``. error: the exception already raised by
    pickling the whole, which skips the first whole pickle. check_main: whether references to
    ``__main__`` count as problems; None decides from whether children can import ``__main__``
    (and, when they can, counts references to what the main script defines only inside
    ``if __name__ == "__main__":``, which the children do not run).
    whole: the object the parts come from, reported as ``name`` if no part is found at fault.
    """
    if protocol is None:
        protocol = pickle.DEFAULT_PROTOCOL
    guarded = ()
    if check_main is None:
        check_main = main_unimportable()
        if not check_main:
            guarded = _guarded_names()
    walker = _Walker(_dumps_with(pickler, protocol), _dispatch_table(pickler), protocol, limit,
                     check_main, guarded)
    if whole is None:
        whole = [obj for _, obj in parts] if len(parts) != 1 else parts[0][1]
    if error is None:
        error = walker.probe(whole)
        if error is None:
            return Explanation(name, [])
    limit_before = sys.getrecursionlimit()
    # The C pickler shares Python's recursion budget on 3.8-3.11: the walk's own frames must
    # not make deep objects fail in probes when they pickle at the top level.
    raised = max(limit_before, 1000 + 30 * _MAX_DEPTH)
    if raised != limit_before:
        sys.setrecursionlimit(raised)
    try:
        if len(parts) == 1:
            walker.walk(parts[0][1], (None, parts[0][0], 0), error, 0)
        else:
            walker.walk_children(list(parts), None, 0)
    finally:
        if sys.getrecursionlimit() == raised:  # another thread may have changed it since
            sys.setrecursionlimit(limit_before)
    if not walker.problems:
        walker.record(whole, (None, name, 0), error, None)
    problems = walker.sorted_problems()
    return Explanation(name, problems, _error_text(error) if problems else None,
                       walker.truncated)


def main_unimportable():
    """Whether spawn/forkserver children of this process fail to import ``__main__``'s objects.

    Mirrors ``multiprocessing.spawn``: a main module run by name (``python -m pkg.mod``) or from
    a file is imported again in each child; ``python -c``, the REPL, notebooks (no file) and
    ``python -m pkg`` (``pkg.__main__``, which children skip) are not.
    """
    import os
    main = sys.modules.get("__main__")
    if main is None:
        return True
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        return spec_name == "__main__" or spec_name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return True
    return os.path.splitext(os.path.basename(path))[0] == "ipython"


def _guarded_names():
    """The classes and functions the main script defines only under its main guard."""
    from mpcompat.diagnose.main_guard import guarded_definitions
    try:
        return guarded_definitions()
    except Exception:  # a main script that cannot be read or parsed: no names to give
        return ()


def _guarded_reference(target):
    """A MainReference for ``target`` if the main script binds its name only under its main
    guard, else None."""
    import os
    from mpcompat.diagnose import main_guard
    path = main_guard.main_file()
    binding = main_guard.guarded(target.__qualname__, path) if path else None
    if binding is None:
        return None
    exc = MainReference(
        "%s is pickled as a reference to __main__.%s, defined inside `if __name__ == "
        "\"__main__\":` at %s:%d, which spawn and forkserver children do not run"
        % (describe(target), target.__qualname__, os.path.basename(path), binding.line))
    exc.guard = (path, binding)
    return exc


def _dumps_with(pickler, protocol):
    if pickler is None:
        return functools.partial(pickle.dumps, protocol=protocol)

    def dumps(obj):
        buf = io.BytesIO()
        pickler(buf, protocol).dump(obj)
        return buf.getbuffer()
    return dumps


def _dispatch_table(pickler):
    table = copyreg.dispatch_table
    extra = getattr(pickler, "_extra_reducers", None) if pickler is not None else None
    if extra:
        table = dict(table)
        table.update(extra)
    return table


class _Key(object):
    """A mapping key in a path, formatted only when a problem is reported."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __str__(self):
        return "[%s]" % _short_repr(self.key)


class _FlatIndex(object):
    """An index into a numpy array, given flat, formatted as ``[i, j]``."""

    __slots__ = ("flat", "shape")

    def __init__(self, flat, shape):
        self.flat, self.shape = flat, shape

    def __str__(self):
        index, rest = [], self.flat
        for size in reversed(self.shape):
            rest, i = divmod(rest, size)
            index.append(i)
        return "[%s]" % ", ".join(str(i) for i in reversed(index))


def _wrap(text, width):
    """Wrap prose lines of a hint; indented lines (code) stay as they are."""
    import textwrap
    lines = []
    for line in text.splitlines():
        if line[:1].isspace() or not line:
            lines.append(line)
        else:
            # Paths and names stay whole, even where longer than a line.
            lines.extend(textwrap.wrap(line, width, break_long_words=False,
                                       break_on_hyphens=False) or [""])
    return lines


def _segment(segment):
    return "[%d]" % segment if type(segment) is int else str(segment)


def format_path(path):
    """Turn a walk path (nested ``(parent, segment, position)`` tuples) into text."""
    parts = []
    while path is not None:
        path, segment, _ = path
        parts.append(_segment(segment))
    return "".join(reversed(parts))


def _positions(path):
    positions = []
    while path is not None:
        path, _, position = path
        positions.append(position)
    return tuple(reversed(positions))


def _short_repr(value):
    try:
        text = repr(value)
    except Exception:
        text = "<%s object>" % _type_name(type(value))
    return text if len(text) <= _REPR_MAX else text[:_REPR_MAX - 3] + "..."


def _error_text(exc):
    if exc is None:
        return None
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable>"
    text = text.strip().splitlines()[0] if text.strip() else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def describe(obj):
    """A short description: ``"function mod.f"``, ``"class mod.C"``, ``"mod.C object"``."""
    cls = type(obj)
    if cls is types.FunctionType:
        return "function %s.%s" % (obj.__module__, obj.__qualname__)
    if isinstance(obj, type):
        return "class %s" % _type_name(obj)
    if cls is types.ModuleType:
        return "module %r" % (obj.__dict__.get("__name__"),)
    if cls is types.MethodType:
        return "bound method %s of a %s object" % (
            getattr(obj.__func__, "__qualname__", "?"), _type_name(type(obj.__self__)))
    return "%s object" % _type_name(cls)


def _opaque_types():
    """Types reported whole: what is inside them (a lock, a callback) would only obscure it."""
    import threading
    import weakref
    found = [io.IOBase, threading.Thread, threading.Event, threading.Barrier,
             threading.Semaphore, threading.Condition, weakref.WeakValueDictionary,
             weakref.WeakKeyDictionary, weakref.WeakSet, weakref.finalize,
             types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType]
    for module, names in (("queue", ("Queue",)), ("socket", ("socket",)),
                          ("sqlite3", ("Connection", "Cursor")), ("torch", ("Tensor",))):
        mod = sys.modules.get(module)
        found += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        found.append(numpy.generic)
    jit = getattr(sys.modules.get("torch"), "jit", None)
    found += [t for t in (getattr(jit, "ScriptModule", None), getattr(jit, "ScriptFunction", None))
              if isinstance(t, type)]
    return tuple(found)


def _is_leaf(obj, cls, opaque):
    if cls is types.FunctionType or cls is types.ModuleType or isinstance(obj, type):
        return True
    if isinstance(obj, opaque):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray) and not obj.dtype.hasobject


def _weight(obj):
    cls = type(obj)
    if cls in _SEQUENCES or cls in _SETS or cls is dict:
        return len(obj)
    return 1


class _Walker(object):
    """One walk: the objects seen, those found failing, and the problems so far."""

    def __init__(self, dumps, dispatch, protocol, limit, check_main, guarded=()):
        self.dumps, self.dispatch, self.protocol = dumps, dispatch, protocol
        self.limit, self.check_main = limit, check_main
        # Names (as bytes) defined only under the main script's guard: a pickle that holds
        # "__main__" and one of them may refer to what children cannot import.
        self.guarded = tuple(name.encode("utf-8") for name in guarded)
        self.problems = []
        self.positions = []    # per problem: the child positions along its path
        self.truncated = False
        self.seen = set()      # ids walked, or found to pickle
        self.failing = set()   # ids whose failure is accounted for by a problem
        self.keep = []         # keeps what reductions created alive, so ids stay unique
        self.class_errors = {}
        self.opaque = _opaque_types()

    def probe(self, obj):
        """Pickle ``obj``; return the exception, or None when it pickles."""
        try:
            data = self.dumps(obj)
        except Exception as exc:
            return exc
        if self.check_main and b"__main__" in bytes(data):
            return MainReference("pickles a reference to __main__, which child processes "
                                 "cannot import")
        if self.guarded:
            raw = data if type(data) is bytes else bytes(data)
            if b"__main__" in raw and any(name in raw for name in self.guarded):
                return MainReference("pickles a reference to __main__ that may be defined "
                                     "under its main guard")
        return None

    def done(self):
        if len(self.problems) >= self.limit:
            self.truncated = True
            return True
        return False

    def walk(self, obj, path, exc, depth):
        """Walk ``obj``, which fails to pickle with ``exc`` (None: presumed to fail).

        Returns True when the failure is accounted for by a problem reported here or before.
        """
        if self.done():
            return True
        oid = id(obj)
        if oid in self.failing:
            return True
        if oid in self.seen:
            return False  # an ancestor being walked, or known to pickle
        self.seen.add(oid)
        self.keep.append(obj)
        cls = type(obj)
        if depth >= _MAX_DEPTH or _is_leaf(obj, cls, self.opaque):
            return self.record(obj, path, exc, None)
        try:
            children, culprit = self.children(obj, cls)
        except Exception as reduce_exc:
            return self.record(obj, path, exc or reduce_exc, None)
        if culprit is not None:
            return self.record(obj, path, culprit[1], culprit[0])
        if self.walk_children(children, path, depth):
            self.failing.add(oid)
            return True
        return self.record(obj, path, exc, None)

    def walk_children(self, children, path, depth):
        """Walk the ``(segment, child)`` pairs of a failing object; True if a problem is found."""
        pending, found = [], False
        for position, (segment, child) in enumerate(children):
            if type(child) in _ATOMIC:
                continue
            cid = id(child)
            if cid in self.failing:
                found = True
            elif cid not in self.seen:
                pending.append((segment, child, position))
        if pending:
            found = self.group(pending, path, depth, not found) or found
        return found

    def group(self, items, path, depth, presumed):
        """Find the failing items; ``presumed``: the group is believed to hold one."""
        if self.done():
            return True
        if len(items) > _GROUP:
            half = len(items) // 2
            left, right = items[:half], items[half:]
            found = False
            if self.probe([item[1] for item in left]) is not None:
                found = self.group(left, path, depth, True)
            if found or not presumed:
                if self.probe([item[1] for item in right]) is not None:
                    found = self.group(right, path, depth, True) or found
            else:
                found = self.group(right, path, depth, True)
            return found
        items.sort(key=lambda item: _weight(item[1]))
        found = False
        last = len(items) - 1
        for index, (segment, child, position) in enumerate(items):
            if self.done():
                return True
            cid = id(child)
            if cid in self.failing:
                found = True
                continue
            if cid in self.seen:
                continue
            if index == last and presumed and not found:
                exc = None  # everything else pickles, so this one is where it fails
            else:
                exc = self.probe(child)
                if exc is None:
                    self.seen.add(cid)
                    self.keep.append(child)
                    continue
            if self.walk(child, (path, segment, position), exc, depth + 1):
                found = True
        return found

    def children(self, obj, cls):
        """Return ``(children, culprit)``: the parts pickle saves for ``obj``.

        culprit is ``(class, exception)`` when the class (or callable) that rebuilds ``obj``
        cannot itself be pickled; the problem is then ``obj`` itself.
        """
        if cls is dict:
            return self._mapping_children(list(obj.items())), None
        if cls in _SEQUENCES:
            return list(enumerate(obj)), None
        if cls in _SETS:
            return [("{%d}" % i, item) for i, item in enumerate(obj)], None
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):  # dtype=object
            flat = obj.ravel(order="C")
            shape = obj.shape
            if len(shape) == 1:
                return list(enumerate(flat.tolist())), None
            return [(_FlatIndex(i, shape), item) for i, item in enumerate(flat.tolist())], None
        if isinstance(obj, functools.partial):
            culprit = self._class_culprit(cls)
            if culprit is not None:
                return [], culprit
            children = [(".func", obj.func)]
            children += [(".args[%d]" % i, a) for i, a in enumerate(obj.args)]
            children += [(".keywords[%s]" % _short_repr(k), v) for k, v in obj.keywords.items()]
            return children, None
        reducer = self.dispatch.get(cls)
        if reducer is not None:
            rv = reducer(obj)
        else:
            rv = obj.__reduce_ex__(self.protocol)
        if isinstance(rv, str):
            return [], None  # pickled by reference: a leaf
        self.keep.append(rv)
        return self._reduce_children(obj, cls, rv)

    def _class_culprit(self, klass):
        if klass in self.class_errors:
            exc = self.class_errors[klass]
        else:
            exc = self.class_errors[klass] = self.probe(klass)
        return None if exc is None else (klass, exc)

    def _reduce_children(self, obj, cls, rv):
        func, args = rv[0], rv[1] if len(rv) > 1 else ()
        state = rv[2] if len(rv) > 2 else None
        listitems = rv[3] if len(rv) > 3 else None
        dictitems = rv[4] if len(rv) > 4 else None
        children = []
        protocol_text = ".__reduce_ex__(%d)" % self.protocol
        args = tuple(args) if args is not None else ()
        if func is copyreg.__newobj__ and args and isinstance(args[0], type):
            culprit = self._class_culprit(args[0])
            if culprit is not None:
                return [], culprit
            fields = getattr(cls, "_fields", None) if issubclass(cls, tuple) else None
            for i, arg in enumerate(args[1:]):
                if fields is not None and i < len(fields) and isinstance(fields[i], str):
                    children.append(("." + fields[i], arg))
                elif issubclass(cls, tuple):
                    children.append((i, arg))
                else:
                    children.append((".__getnewargs__()[%d]" % i, arg))
        elif func is getattr(copyreg, "__newobj_ex__", None) and len(args) == 3:
            culprit = self._class_culprit(args[0]) if isinstance(args[0], type) else None
            if culprit is not None:
                return [], culprit
            children += [(".__getnewargs_ex__()[0][%d]" % i, a) for i, a in enumerate(args[1])]
            children += [(".__getnewargs_ex__()[1][%s]" % _short_repr(k), v)
                         for k, v in dict(args[2]).items()]
        elif func is getattr and len(args) == 2 and isinstance(args[1], str):
            children.append((".__self__", args[0]))  # a bound method
        elif func is cls and isinstance(obj, collections.defaultdict) and len(args) == 1:
            children.append((".default_factory", args[0]))
        else:
            if isinstance(func, type):
                culprit = self._class_culprit(func)
                if culprit is not None:
                    return [], culprit
            else:
                children.append(("%s[0]" % protocol_text, func))
            children += [("%s[1][%d]" % (protocol_text, i), a) for i, a in enumerate(args)]
        if state is not None:
            children += self._state_children(state, protocol_text)
        if listitems is not None:
            children += list(enumerate(listitems))
        if dictitems is not None:
            children += self._mapping_children(list(dictitems))
        return children, None

    def _state_children(self, state, protocol_text):
        if (type(state) is tuple and len(state) == 2
                and all(s is None or type(s) is dict for s in state)):
            parts = [s for s in state if s]  # (__dict__, slots) from __slots__ classes
        elif type(state) is dict:
            parts = [state]
        else:
            return [(".__getstate__()", state)]
        children = []
        for part in parts:
            for key, value in part.items():
                if type(key) is str and key.isidentifier():
                    children.append(("." + key, value))
                else:
                    children.append((".__dict__[%s]" % _short_repr(key), value))
        return children

    @staticmethod
    def _mapping_children(items):
        children = []
        for index, (key, value) in enumerate(items):
            if type(key) not in _ATOMIC:
                children.append(("<key %d>" % index, key))
            children.append((_Key(key), value))
        return children

    def record(self, obj, path, exc, culprit):
        """Report ``obj`` as a problem (``exc`` None: pickle it to get the error first)."""
        if exc is None:
            exc = self.probe(obj)
            if exc is None:
                self.seen.add(id(obj))
                return False
        if isinstance(exc, MainReference):
            target = culprit if culprit is not None else obj
            module = getattr(target, "__module__", None) if (
                isinstance(target, type) or type(target) is types.FunctionType) else None
            if module not in _MAIN_NAMES:
                return False  # some other mention of "__main__" in the data
            if self.check_main:
                exc = MainReference(
                    "%s is pickled as a reference to __main__.%s, which child processes "
                    "started by spawn or forkserver cannot import" % (describe(target),
                                                                      target.__qualname__))
            else:
                exc = _guarded_reference(target)
                if exc is None:
                    return False  # defined where children import it from
        self.failing.add(id(obj))
        if self.done():
            return True
        from mpcompat.diagnose.hints import hint_for
        text = format_path(path)
        try:
            hint = hint_for(obj, exc, text, culprit)
        except Exception:
            hint = None
        self.problems.append(Problem(text, type(obj), _error_text(exc), hint, exc,
                                     describe(obj)))
        self.positions.append(_positions(path))
        return True

    def sorted_problems(self):
        """The problems in the order pickle meets them (the walk visits big parts last)."""
        order = sorted(range(len(self.problems)), key=self.positions.__getitem__)
        return [self.problems[i] for i in order]
