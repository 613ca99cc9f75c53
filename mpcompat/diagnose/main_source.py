"""Where a Python file binds its module-level names, inside ``if __name__ == "__main__":`` or
not: the script's source read with :mod:`ast`, once per file version. Imported only when a report
needs it (never by a Pool's helper threads: ``ast`` costs milliseconds to import)."""
import ast
import collections
import os

__all__ = ["Binding", "Analysis", "analyze"]

_cache = {}  # path -> ((mtime_ns, size), Analysis or None); a race only parses a file twice
_DEFINITIONS = ("class", "function")


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
