"""``python -m mpcompat explain module:attribute``: print why an object cannot be pickled.

Exit code 0 when it pickles, 1 when there are problems (a class or function that the module
defines only inside ``if __name__ == "__main__":`` is one), 2 for bad input (no colon, a module
that cannot be imported, a missing attribute).
"""
import importlib
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
                from mpcompat.diagnose.main_guard import explain_guarded
                found = explain_guarded(path, part)
                if found is not None:
                    raise GuardedName(*found)
            raise ValueError("%s: cannot get attribute %r: %s" % (target, part, exc))
    return attribute, obj


def main(args):
    """Print the report for ``args.target``; return 0 (ok), 1 (problems) or 2 (bad input)."""
    try:
        name, obj = resolve(args.target)
    except GuardedName as exc:
        report, problem = exc.args
        print(report, file=sys.stdout if problem else sys.stderr)
        return 1 if problem else 2
    except ValueError as exc:
        print("mpcompat explain: %s" % exc, file=sys.stderr)
        return 2
    from mpcompat.diagnose import explain
    report = explain(obj, name=name, limit=max(1, args.limit))
    print(report)
    return 0 if report.ok else 1
