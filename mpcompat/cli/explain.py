"""``python -m mpcompat explain module:attribute``: print why an object cannot be pickled.

Exit code 0 when it pickles, 1 when there are problems (a class or function that the module
defines only inside ``if __name__ == "__main__":`` is one), 2 for bad input (no colon, a module
that cannot be imported, a missing attribute).
"""
import importlib
import os
import sys


def add_arguments(parser):
    """Arguments of ``mpcompat explain``."""
    parser.add_argument("target", metavar="MODULE:ATTRIBUTE",
                        help="the object to explain, e.g. mypkg.data:train_dataset or "
                             "mypkg.data:loader.dataset")
    parser.add_argument("--limit", type=int, default=10,
                        help="report at most this many problems (default 10)")


class GuardedName(ValueError):
    """``args``: ``(report, problem)`` for an attribute bound only under the module's main guard:
    the text to print, and whether the object itself is the problem (exit 1)."""


def explain_guarded(path, name):
    """None unless the module file ``path`` binds ``name`` only inside its main guard, else
    ``(report, problem)``: whether it is a class or function children cannot import (exit 1)
    rather than a value created under the guard (exit 2)."""
    from mpcompat.diagnose import main_guard
    analysis = main_guard.analyze(path)
    binding = analysis.only_inside(name) if analysis is not None else None
    if binding is None:
        return None
    script = os.path.basename(path)
    if binding.kind in ("class", "function"):
        from mpcompat.diagnose.walker import Explanation, Problem
        what = "%s %s, defined inside `if __name__ == \"__main__\":` of %s, line %d" % (
            binding.kind, name, script, binding.line)
        problem = Problem(name, None, None, main_guard.advice(name, path, binding), what)
        return Explanation(name, [problem]).format(
            "%s cannot be pickled for spawn or forkserver children: 1 problem found." % name), True
    import textwrap
    text = ("%s is created inside `if __name__ == \"__main__\":` of %s, line %d, which runs only "
            "when %s is the main script, so it cannot be imported to be explained. Call "
            "mpcompat.explain(%s) in the script, or move what creates it to module level."
            % (name, path, binding.line, script, name))
    definitions = sorted((b.line, n, b.kind) for n, b in analysis.definitions().items())
    if definitions:
        text += (" Spawn and forkserver children will also lack what that block defines: %s; "
                 "define %s at module level." % (
                     ", ".join("%s %s (line %d)" % (k, n, line) for line, n, k in definitions),
                     "it" if len(definitions) == 1 else "them"))
    return textwrap.fill(text, 92, break_long_words=False, break_on_hyphens=False), False


def resolve(target):
    """Import ``module:attr.sub`` and return ``(name, object)``; raise ValueError if it can't."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError("expected MODULE:ATTRIBUTE (e.g. mypkg.data:dataset), got %r" % target)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as python -m does: modules in the current directory
    try:
        obj = module = importlib.import_module(module_name)
    except BaseException as exc:  # the module's own code may raise anything, even SystemExit
        raise ValueError("cannot import module %r: %s: %s" % (module_name, type(exc).__name__,
                                                              exc))
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except Exception as exc:
            path = getattr(module, "__file__", None)
            if obj is module and isinstance(path, str) and path.endswith(".py"):
                found = explain_guarded(path, part)
                if found is not None:
                    raise GuardedName(*found)
            raise ValueError("%s: cannot get attribute %r: %s" % (target, part, exc))
    return attribute, obj


def main(args):
    """Print the report for ``args.target``; return 0 (ok), 1 (problems) or 2 (bad input)."""
    try:
        name, obj = resolve(args.target)
    except ValueError as exc:
        report, problem = exc.args if isinstance(exc, GuardedName) else (
            "mpcompat explain: %s" % exc, False)
        print(report, file=sys.stdout if problem else sys.stderr)
        return 1 if problem else 2
    from mpcompat.diagnose import explain
    report = explain(obj, name=name, limit=max(1, args.limit))
    print(report)
    return 0 if report.ok else 1
