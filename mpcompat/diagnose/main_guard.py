"""Names a script binds only inside ``if __name__ == "__main__":``, which its children lack.

A spawn or forkserver child imports the main script again, as ``__mp_main__``, without running
that block: a class defined there pickles in the parent (as ``__main__.X``) and every child fails
with "Can't get attribute 'X' on <module '__mp_main__' ...>". The script's source is read
(``mpcompat.diagnose.main_source``, only when asked) to tell where such a name is bound.
"""
import os
import pickle
import re
import sys

__all__ = ["analyze", "main_file", "main_unimportable", "guarded",
           "guarded_definitions", "advice", "explain_missing", "explain_missing_attribute"]

# 3.8-3.13: "Can't get attribute 'X' on <module '__mp_main__' from '/path/script.py'>";
# newer: "module '__mp_main__' has no attribute 'X'".
# (Compiled at first use, by re's cache: this module loads with every Pool.)
_MISSING = (
    r"Can't get attribute '([^']+)' on <module '(?:__mp_main__|__main__)'(?: from '([^']*)')?",
    r"module '(?:__mp_main__|__main__)' has no attribute '([^']+)'",
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


def analyze(path):
    """The :class:`~mpcompat.diagnose.main_source.Analysis` of the Python file ``path`` (cached
    per file, modification time and size), or None if it cannot be read."""
    from mpcompat.diagnose import main_source
    return main_source.analyze(path)


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
    match = re.search(_MISSING[0], text) or re.search(_MISSING[1], text)
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
