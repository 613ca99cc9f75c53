"""Names a script binds only inside ``if __name__ == "__main__":``, which its children lack.

A spawn or forkserver child imports the main script again, as ``__mp_main__``, without running
that block: a class defined there pickles in the parent (as ``__main__.X``) and every child fails
with "Can't get attribute 'X' on <module '__mp_main__' ...>". The script's source is read with
:mod:`ast` (only when asked, once per file version) to tell where such a name is bound.
"""
import ast
import collections
import os
import pickle
import re
import sys

__all__ = ["Binding", "Analysis", "analyze", "main_file", "main_unimportable", "guarded",
           "guarded_definitions", "advice", "explain_missing", "explain_missing_attribute"]

_cache = {}  # path -> ((mtime_ns, size), Analysis or None); a race only parses a file twice
_DEFINITIONS = ("class", "function")
# 3.8-3.13: "Can't get attribute 'X' on <module '__mp_main__' from '/path/script.py'>";
# newer: "module '__mp_main__' has no attribute 'X'".
_MISSING = (
    re.compile(r"Can't get attribute '([^']+)' on <module '(?:__mp_main__|__main__)'"
               r"(?: from '([^']*)')?"),
    re.compile(r"module '(?:__mp_main__|__main__)' has no attribute '([^']+)'"),
)


class MainReference(pickle.PicklingError):
    """Not raised by pickle: marks an object pickled as a reference into ``__main__``;
    ``hint``: where it is bound and the fix, when known."""

    hint = None


def missing_message(name, module="__mp_main__"):
    """The error CPython gives, on this Python, when unpickling finds no ``name`` in the
    child's ``module`` (the form a user finds in the child's traceback)."""
    if sys.version_info >= (3, 14):
        return "AttributeError: module %r has no attribute %r" % (module, name)
    return "AttributeError: Can't get attribute %r on <module %r>" % (name, module)


Binding = collections.namedtuple("Binding", "name line kind guard_line")
Binding.__doc__ = """Where a module-level name is bound: ``line``, ``kind`` ("class", "function"
or "name") and, inside a main guard, ``guard_line`` (the line of its ``if``), else None."""


class Analysis(object):
    """The module-level names of one file: ``outside`` and ``inside`` (``{name: Binding}``, the
    first binding where children run the code, and in a main guard), ``guards`` (the lines of
    the guards' ``if``) and ``spans`` (``(first, last)`` lines that run only in the main process).
    """

    __slots__ = ("outside", "inside", "guards", "spans")

    def __init__(self):
        self.outside, self.inside, self.guards, self.spans = {}, {}, [], []

    def guards_line(self, line):
        """Whether ``line`` runs only in the main process (inside a main guard)."""
        return any(first <= line <= last for first, last in self.spans)

    def only_inside(self, name):
        """The Binding of ``name`` if it is bound in a main guard and nowhere else, or None."""
        return self.inside.get(name) if name not in self.outside else None

    def definitions(self):
        """``{name: Binding}`` of the classes and functions defined only in a main guard."""
        return {name: b for name, b in self.inside.items()
                if b.kind in _DEFINITIONS and name not in self.outside}


def analyze(path):
    """The :class:`Analysis` of the Python file ``path`` (cached per file, modification time and
    size), or None if it cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    key = (st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    import tokenize
    result = Analysis()
    try:
        with tokenize.open(path) as fh:
            _scan(ast.parse(fh.read(), path).body, None, result)
    except Exception:  # unreadable, not Python, a syntax error: nothing is known
        result = None
    if len(_cache) > 64:
        _cache.clear()
    _cache[path] = (key, result)
    return result


def _skipped(spec_name):
    """Whether children skip a main module of this spec name (``python -m pkg``)."""
    return spec_name == "__main__" or spec_name.endswith(".__main__")


def main_file(module_name="__main__"):
    """The file of the main module that spawn/forkserver children import again, or None (for
    ``python -c``, the REPL, notebooks, ``python -m pkg`` and scripts not named ``*.py``)."""
    main = sys.modules.get(module_name)
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py") or _skipped(spec_name or ""):
        return None
    return os.path.abspath(path)


def main_unimportable():
    """Whether spawn/forkserver children of this process fail to import ``__main__``'s objects:
    as ``multiprocessing.spawn``, true for ``python -c``, the REPL, notebooks and ``python -m
    pkg`` (``pkg.__main__``, which children skip)."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        return _skipped(spec_name)
    path = getattr(main, "__file__", None)
    return not path or os.path.splitext(os.path.basename(path))[0] == "ipython"


def main_reference(target, description, check_main):
    """The MainReference (with its hint) to report for ``target``, pickled as a reference into
    ``__main__``; None when children can import it (``check_main`` false and not bound only
    under the main guard)."""
    qualname = target.__qualname__
    if check_main:
        exc = MainReference(
            "%s is pickled as a reference to __main__.%s, which child processes started by "
            "spawn or forkserver cannot import" % (description, qualname))
        exc.hint = no_main_file_advice(qualname)
        return exc
    path = main_file()
    binding = guarded(qualname, path)
    if binding is None:
        return None
    exc = MainReference(
        "%s is pickled as a reference to __main__.%s, defined inside `if __name__ == "
        "\"__main__\":` at %s:%d, which spawn and forkserver children do not run"
        % (description, qualname, os.path.basename(path), binding.line))
    exc.hint = advice(qualname, path, binding)
    return exc


def guarded(name, path=None):
    """The Binding of ``name`` (a qualname: its first part counts) when ``path`` (default: the
    main script) binds it only inside ``if __name__ == "__main__":``; else None."""
    analysis = analyze(path or main_file())
    return analysis.only_inside(name.split(".")[0]) if analysis is not None else None


def guarded_definitions(path=None):
    """The names of classes and functions the main script (or ``path``) defines only inside a
    main guard: the names that can be pickled by reference and then fail in children."""
    analysis = analyze(path or main_file())
    return frozenset(analysis.definitions() if analysis is not None else ())


def advice(qualname, path, binding):
    """Explain that ``qualname`` is bound inside the main guard of ``path``, and the fix."""
    name = qualname.split(".")[0]
    script = os.path.basename(path)
    kind = {"class": "class ", "function": "function "}.get(binding.kind, "")
    what = "%s%s" % (kind, name) if name == qualname else "%s (the %s%s it belongs to)" % (
        qualname, kind, name)
    return ("%s is defined inside `if __name__ == \"__main__\":` of %s, line %d. Spawn and "
            "forkserver child processes import %s as __mp_main__ without running that block, "
            "so unpickling a reference to __main__.%s fails there with \"%s\". Move %s to "
            "module level (above the `if __name__ == \"__main__\":` of line %d), or into a "
            "module that %s imports." % (what, path, binding.line, script, qualname,
                                         missing_message(qualname),
                          "the %s%s" % (kind, name) if kind else "the code that binds %s" % name,
                          binding.guard_line, script))


def explain_missing(qualname, path):
    """Why a child that imported ``path`` as ``__mp_main__`` lacks ``qualname``, or None: it is
    bound only inside the main guard, nowhere at module level, or where the child skipped it."""
    analysis = analyze(path)
    if analysis is None:
        return None
    name = qualname.split(".")[0]
    script = os.path.basename(path)
    binding = analysis.only_inside(name)
    if binding is not None:
        return advice(qualname, path, binding)
    outside = analysis.outside.get(name)
    if outside is None:
        return ("%s is not defined at module level of %s (nor inside its `if __name__ == "
                "\"__main__\":` block): the parent created it at run time (with exec(), type(), "
                "globals()[...] or inside a function), and spawn and forkserver child processes, "
                "which import %s as __mp_main__, cannot find it. Define %s with class or def at "
                "module level of %s, or in a module that %s imports." % (
                    name, path, script, name, script, script))
    if name != qualname:
        return None  # the outer name exists: an inner attribute is missing, nothing known
    return ("%s is bound at module level of %s, line %d, but was not bound when this child "
            "process imported %s as __mp_main__: the statement did not run there (a condition "
            "that differs in children, an import that failed, or code under `if __name__ == "
            "\"__main__\":` that binds it first)." % (name, path, outside.line, script))


def explain_missing_attribute(exc):
    """In a child process: if ``exc`` is the AttributeError of unpickling a reference to
    something the main module lacks here, return where the script binds it and the fix (or the
    fix for a ``__main__`` children cannot import at all); else None."""
    if not isinstance(exc, AttributeError):
        return None
    text = str(exc).split("\n", 1)[0]
    match = _MISSING[0].search(text) or _MISSING[1].search(text)
    if match is None:
        return None
    name = match.group(1)
    # The file the message names, if it names one (only the older message does).
    path = main_file("__mp_main__") or main_file() or (match.groups() + (None,))[1]
    if path is not None:
        return explain_missing(name, path)
    return no_main_file_advice(name) if "'__main__'" in text else None


def no_main_file_advice(qualname):
    """Explain that ``qualname`` lives in a ``__main__`` the children cannot import (python -c,
    an interactive session, a notebook), and the fix."""
    return ("%s is defined in __main__, which spawn and forkserver children cannot import here "
            "(the program runs from python -c, an interactive session or a notebook), so the "
            "child fails with \"%s\". Move it into a module (a .py file next to the script or "
            "notebook) and import it from there."
            % (qualname, missing_message(qualname.split(".")[0], "__main__")))


# --- the analysis ------------------------------------------------------------------------------

def _guard(test):
    """1 for ``__name__ == "__main__"``, -1 for ``__name__ != "__main__"``, else 0."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return 0
    sides = (test.left, test.comparators[0])
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    if len(names) != 1 or len(consts) != 1:
        return 0
    if isinstance(test.ops[0], (ast.Eq, ast.Is)):
        return 1
    return -1 if isinstance(test.ops[0], (ast.NotEq, ast.IsNot)) else 0


def _scan(body, guard_line, analysis):
    for stmt in body:
        if isinstance(stmt, ast.If):
            sense = _guard(stmt.test) if guard_line is None else 0
            _scan(stmt.body, stmt.lineno if sense == 1 else guard_line, analysis)
            _scan(stmt.orelse, stmt.lineno if sense == -1 else guard_line, analysis)
            if sense:
                analysis.guards.append(stmt.lineno)
                guarded_body = stmt.body if sense == 1 else stmt.orelse
                if guarded_body:
                    analysis.spans.append((guarded_body[0].lineno, guarded_body[-1].end_lineno))
            continue
        for name, kind in _bound(stmt):
            _bind(analysis, name, kind, stmt.lineno, guard_line)
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                _scan(getattr(stmt, field, None) or (), guard_line, analysis)
        for handler in getattr(stmt, "handlers", None) or ():
            if handler.name:
                _bind(analysis, handler.name, "name", handler.lineno, guard_line)
            _scan(handler.body, guard_line, analysis)
        for case in getattr(stmt, "cases", None) or ():  # match (3.10+)
            _scan(case.body, guard_line, analysis)


def _bind(analysis, name, kind, line, guard_line):
    table = analysis.inside if guard_line is not None else analysis.outside
    table.setdefault(name, Binding(name, line, kind, guard_line))  # the first binding counts


def _bound(stmt):
    """The ``(name, kind)`` pairs a module-level statement binds."""
    if isinstance(stmt, ast.ClassDef):
        return [(stmt.name, "class")]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(stmt.name, "function")]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [((a.asname or a.name.split(".")[0]), "name") for a in stmt.names
                if a.name != "*"]
    targets = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target] if getattr(stmt, "value", True) is not None else []
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    names = []
    while targets:
        node = targets.pop()
        if isinstance(node, ast.Name):
            names.append((node.id, "name"))
        elif isinstance(node, (ast.Tuple, ast.List)):
            targets.extend(node.elts)
        elif isinstance(node, ast.Starred):
            targets.append(node.value)
    return names
