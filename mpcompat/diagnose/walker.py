"""``explain(obj)``: which parts of an object cannot be pickled, where they sit, and why.

The walk follows pickle (containers item by item, anything else through its reduction). Each
subtree is pickled whole before the walk enters it and big containers are split in halves, so
one offender among 30,000 entries costs a few pickles of the whole.
"""
import collections
import copyreg
import functools
import gc
import io
import pickle
import sys
import textwrap  # here, not where a Pool's task handler formats a report (the fork rule)
import types

from mpcompat.diagnose.main_guard import (MainReference, guarded_definitions, main_reference,
                                          main_unimportable)
from mpcompat.diagnose.hints import hint_for, type_name as _type_name

__all__ = ["explain", "assert_picklable", "Explanation", "Problem"]

DEFAULT_LIMIT = 10
_MAX_DEPTH = 60  # deeper, the walk stops and reports the subtree as a whole
_GROUP = 8  # bigger groups are split in halves instead of pickled item by item
_REPR_MAX = 60

_ATOMIC = frozenset([type(None), bool, int, float, complex, str, bytes, bytearray, range,
                     type(Ellipsis), type(NotImplemented)])
_SEQUENCES = (list, tuple)
_SETS = (set, frozenset)
_CONTAINERS = _SEQUENCES + _SETS + (dict,)
_MAIN_NAMES = ("__main__", "__mp_main__")


class Problem(object):
    """One part that cannot be pickled: ``path`` (``loader.dataset.transforms[3].fh``),
    ``type``, ``error`` (``"TypeError: cannot pickle ..."``), ``hint`` (or None) and ``what``
    (a short description: ``"function 'make.<locals>.<lambda>'"``). No exception, traceback or
    frame: kept on the error it explains, that would make a cycle through the error's frames,
    keeping them and the queues they hold alive until the next garbage collection."""

    __slots__ = ("path", "type", "error", "hint", "what")

    def __init__(self, path, type, error, hint, what):
        self.path, self.type, self.error, self.hint, self.what = path, type, error, hint, what

    def format(self, indent="  ", known=None):
        """The problem as indented lines; without the error line when it is ``known``."""
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
    """What :func:`explain` found (``str()``: a readable report): ``name`` (where paths start),
    ``ok``, ``problems`` (:class:`Problem` list), ``truncated`` (stopped at the limit) and
    ``error`` (of pickling the whole; None when ok)."""

    def __init__(self, name, problems, error=None, truncated=False):
        self.name, self.problems, self.error, self.truncated = name, problems, error, truncated
        self.ok = not problems

    def format(self, header=None, known=None):
        """The report as text; ``header`` replaces its first line; ``known``: as in Problem."""
        if self.ok:
            return header or "%s can be pickled." % self.name
        count = len(self.problems)
        first = header or "%s cannot be pickled: %d problem%s found." % (
            self.name, count, "" if count == 1 else "s")
        lines = _wrap(first, 92) + [problem.format(known=known) for problem in self.problems]
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
    """An :class:`Explanation` of at most ``limit`` parts of ``obj`` that cannot be pickled,
    with paths from ``name`` that read like Python (``name.attr``, ``name['key']``, ``name[3]``).
    An object that pickles costs one ``pickle.dumps``."""
    return explain_parts([(name, obj)], name=name, limit=limit, protocol=protocol)


def assert_picklable(obj, name="obj", limit=DEFAULT_LIMIT, protocol=None):
    """Raise ``AssertionError`` with the :func:`explain` report if ``obj`` cannot be pickled."""
    report = explain(obj, name=name, limit=limit, protocol=protocol)
    if not report.ok:
        raise AssertionError(str(report))


def explain_parts(parts, name="obj", limit=DEFAULT_LIMIT, protocol=None, pickler=None,
                  error=None, check_main=None, whole=None):
    """Explain a list of ``(path, object)`` parts that are pickled together.

    pickler: a Pickler class (e.g. ForkingPickler, whose extra reducers then count); None for
    ``pickle.dumps``. error: the exception pickling the whole already raised. check_main: whether
    references to ``__main__`` are problems; None: when children cannot import ``__main__``, else
    only references to what the main script defines under its main guard. whole: the object the
    parts come from, reported as ``name`` if no part is found at fault."""
    # The walk makes objects whose reductions recurse hit the recursion limit. A garbage
    # collection then (gc.callbacks, finalizers) whose code recurses again aborts the
    # interpreter ("Cannot recover from stack overflow"): collections wait until the walk is over.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _explain_parts(parts, name, limit, protocol, pickler, error, check_main, whole)
    finally:
        if collecting:
            gc.enable()


def _explain_parts(parts, name, limit, protocol, pickler, error, check_main, whole):
    protocol = pickle.DEFAULT_PROTOCOL if protocol is None else protocol
    guarded = ()
    if check_main is None:
        check_main = main_unimportable()
        guarded = () if check_main else guarded_definitions()
    walker = _Walker(pickler, protocol, limit, check_main, guarded)
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
    # In the order pickle meets them (the walk visits big parts last).
    problems = [problem for _, problem in sorted(walker.problems, key=lambda found: found[0])]
    return Explanation(name, problems, _error_text(error) if problems else None,
                       walker.truncated)


def _dump_with(pickler, protocol, obj):
    buf = io.BytesIO()
    pickler(buf, protocol).dump(obj)
    return buf.getbuffer()


def _flat_index(flat, shape):
    """The path segment ``[i, j]`` of a numpy array's item ``flat``."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(str(i))
    return "[%s]" % ", ".join(reversed(index))


def _wrap(text, width):
    """Wrap prose lines of a hint; indented lines (code) stay as they are."""
    lines = []
    for line in text.splitlines():
        if line[:1].isspace() or not line:
            lines.append(line)
        else:
            # Paths and names stay whole, even where longer than a line.
            lines.extend(textwrap.wrap(line, width, break_long_words=False,
                                       break_on_hyphens=False) or [""])
    return lines


def _key_segment(key):  # path segments are formatted only when a problem is reported
    return "[%s]" % _short_repr(key)


def _short_repr(value):
    try:
        text = repr(value)
    except Exception:
        text = "<%s object>" % _type_name(type(value))
    return text if len(text) <= _REPR_MAX else text[:_REPR_MAX - 3] + "..."


def _error_text(exc):
    try:
        text = str(exc).strip()
    except Exception:
        text = "<unprintable>"
    text = text.splitlines()[0] if text else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def describe_object(obj):
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
                          ("sqlite3", ("Connection", "Cursor")), ("torch", ("Tensor",)),
                          ("numpy", ("generic",)), ("torch.jit", ("ScriptModule",
                                                                  "ScriptFunction"))):
        mod = sys.modules.get(module)
        found += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    return tuple(found)


def _is_leaf(obj, cls, opaque):
    if cls is types.FunctionType or cls is types.ModuleType or isinstance(obj, (type, opaque)):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray) and not obj.dtype.hasobject


class _Walker(object):
    """One walk: the objects seen, those found failing, and the problems so far."""

    def __init__(self, pickler, protocol, limit, check_main, guarded=()):
        self.dumps = (functools.partial(pickle.dumps, protocol=protocol) if pickler is None
                      else functools.partial(_dump_with, pickler, protocol))
        extra = getattr(pickler, "_extra_reducers", None)
        self.dispatch = {**copyreg.dispatch_table, **extra} if extra else copyreg.dispatch_table
        self.protocol, self.limit, self.check_main = protocol, limit, check_main
        # Names (as bytes) defined only under the main script's guard: a pickle that holds
        # "__main__" and one of them may refer to what children cannot import.
        self.guarded = tuple(name.encode("utf-8") for name in guarded)
        self.problems = []     # (the child positions along its path, Problem)
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
            # Its traceback holds this frame, which holds the walker, which keeps exc: a cycle.
            return exc.with_traceback(None)
        raw = bytes(data) if self.check_main or self.guarded else b""
        if b"__main__" not in raw:
            return None
        if self.check_main:
            return MainReference("pickles a reference to __main__, which child processes "
                                 "cannot import")
        if any(name in raw for name in self.guarded):
            return MainReference("pickles a reference to __main__ that may be defined "
                                 "under its main guard")
        return None

    def done(self):
        if len(self.problems) >= self.limit:
            self.truncated = True
        return self.truncated

    def walk(self, obj, path, exc, depth):
        """Walk ``obj``, which fails to pickle with ``exc`` (None: presumed to fail); True when
        the failure is accounted for by a problem reported here or before."""
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
            found = (self.probe([item[1] for item in left]) is not None
                     and self.group(left, path, depth, True))
            # Presumed to hold a failing item, and the left half does not: the right half does.
            if (found or not presumed) and self.probe([item[1] for item in right]) is None:
                return found
            return self.group(right, path, depth, True) or found
        items.sort(key=lambda item: len(item[1]) if type(item[1]) in _CONTAINERS else 1)
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
        """``(children, culprit)``: the parts pickle saves for ``obj``; culprit: ``(class,
        exception)`` when the class that rebuilds ``obj`` cannot be pickled (``obj`` is then the
        problem)."""
        if cls is dict:
            return self._mapping_children(list(obj.items())), None
        if cls in _SEQUENCES:
            return list(enumerate(obj)), None
        if cls in _SETS:
            return [("{%d}" % i, item) for i, item in enumerate(obj)], None
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):  # dtype=object
            return [(functools.partial(_flat_index, i, obj.shape), item)
                    for i, item in enumerate(obj.ravel(order="C").tolist())], None
        if isinstance(obj, functools.partial):
            culprit = self._class_culprit(cls)
            if culprit is not None:
                return [], culprit
            children = [(".func", obj.func)]
            children += [(".args[%d]" % i, a) for i, a in enumerate(obj.args)]
            children += [(".keywords[%s]" % _short_repr(k), v) for k, v in obj.keywords.items()]
            return children, None
        reducer = self.dispatch.get(cls)
        rv = reducer(obj) if reducer is not None else obj.__reduce_ex__(self.protocol)
        if isinstance(rv, str):
            return [], None  # pickled by reference: a leaf
        self.keep.append(rv)
        return self._reduce_children(obj, cls, rv)

    def _class_culprit(self, klass):
        if klass not in self.class_errors:
            self.class_errors[klass] = self.probe(klass)
        exc = self.class_errors[klass]
        return None if exc is None else (klass, exc)

    def _reduce_children(self, obj, cls, rv):
        func, args, state, listitems, dictitems = (tuple(rv) + (None,) * 5)[:5]
        args = tuple(args) if args is not None else ()
        children, rebuilder = [], None
        protocol_text = ".__reduce_ex__(%d)" % self.protocol
        if func is copyreg.__newobj__ and args and isinstance(args[0], type):
            rebuilder = args[0]
            fields = getattr(cls, "_fields", None) if issubclass(cls, tuple) else None
            for i, arg in enumerate(args[1:]):
                if fields is not None and i < len(fields) and isinstance(fields[i], str):
                    children.append(("." + fields[i], arg))
                elif issubclass(cls, tuple):
                    children.append((i, arg))
                else:
                    children.append((".__getnewargs__()[%d]" % i, arg))
        elif func is getattr(copyreg, "__newobj_ex__", None) and len(args) == 3:
            rebuilder = args[0]
            children += [(".__getnewargs_ex__()[0][%d]" % i, a) for i, a in enumerate(args[1])]
            children += [(".__getnewargs_ex__()[1][%s]" % _short_repr(k), v)
                         for k, v in dict(args[2]).items()]
        elif func is getattr and len(args) == 2 and isinstance(args[1], str):
            children.append((".__self__", args[0]))  # a bound method
        elif func is cls and isinstance(obj, collections.defaultdict) and len(args) == 1:
            children.append((".default_factory", args[0]))
        else:
            if isinstance(func, type):
                rebuilder = func
            else:
                children.append(("%s[0]" % protocol_text, func))
            children += [("%s[1][%d]" % (protocol_text, i), a) for i, a in enumerate(args)]
        culprit = self._class_culprit(rebuilder) if isinstance(rebuilder, type) else None
        if culprit is not None:
            return [], culprit
        if state is not None:
            children += self._state_children(state)
        if listitems is not None:
            children += list(enumerate(listitems))
        if dictitems is not None:
            children += self._mapping_children(list(dictitems))
        return children, None

    @staticmethod
    def _state_children(state):
        if (type(state) is tuple and len(state) == 2
                and all(s is None or type(s) is dict for s in state)):
            parts = [s for s in state if s]  # (__dict__, slots) from __slots__ classes
        elif type(state) is dict:
            parts = [state]
        else:
            return [(".__getstate__()", state)]
        return [("." + key if type(key) is str and key.isidentifier()
                 else ".__dict__[%s]" % _short_repr(key), value)
                for part in parts for key, value in part.items()]

    @staticmethod
    def _mapping_children(items):
        children = []
        for index, (key, value) in enumerate(items):
            if type(key) not in _ATOMIC:
                children.append(("<key %d>" % index, key))
            children.append((functools.partial(_key_segment, key), value))
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
            # Else some other mention of "__main__" in the data, or defined where children
            # import it from.
            exc = (main_reference(target, describe_object(target), self.check_main)
                   if module in _MAIN_NAMES else None)
            if exc is None:
                return False
        self.failing.add(id(obj))
        if self.done():
            return True
        steps = []
        while path is not None:
            path, segment, position = path
            steps.append((segment, position))
        steps.reverse()
        text = "".join("[%d]" % segment if type(segment) is int else
                       segment() if callable(segment) else str(segment) for segment, _ in steps)
        try:
            hint = hint_for(obj, exc, text, culprit)
        except Exception:
            hint = None
        problem = Problem(text, type(obj), _error_text(exc), hint, describe_object(obj))
        self.problems.append((tuple(position for _, position in steps), problem))
        return True
