"""``python -m mpcompat explain module:attribute``: print why an object cannot be pickled.

Exit code 0 when it pickles, 1 when there are problems, 2 for bad input (no colon, a module
that cannot be imported, a missing attribute). A class or function that the module defines only
inside ``if __name__ == "__main__":`` is a problem (spawn and forkserver children cannot import
it), reported with where it is and the fix.
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


def resolve(target):
    """Import ``module:attr.sub`` and return ``(name, object)``; raise ValueError if it can't."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError("expected MODULE:ATTRIBUTE (e.g. mypkg.data:dataset), got %r" % target)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as python -m does: modules in the current directory
    try:
        obj = importlib.import_module(module_name)
    except BaseException as exc:  # the module's own code may raise anything, even SystemExit
        raise ValueError("cannot import module %r: %s: %s" % (module_name, type(exc).__name__,
                                                              exc))
    module = obj
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except Exception as exc:
            if obj is module:
                _check_main_guard(module, part)
            raise ValueError("%s: cannot get attribute %r: %s" % (target, part, exc))
    return attribute, obj


class GuardedName(ValueError):
    """The attribute is bound only inside the module's ``if __name__ == "__main__":`` block.

    report: the text to print; problem: whether the object itself is the problem (exit 1).
    """

    def __init__(self, report, problem):
        ValueError.__init__(self, report)
        self.report, self.problem = report, problem


def _check_main_guard(module, name):
    """Raise GuardedName if ``module``'s file binds ``name`` only under its main guard."""
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return
    from mpcompat.diagnose.main_guard import explain_guarded
    found = explain_guarded(path, name)
    if found is not None:
        raise GuardedName(*found)


def main(args):
    """Print the report for ``args.target``; return 0 (ok), 1 (problems) or 2 (bad input)."""
    try:
        name, obj = resolve(args.target)
    except GuardedName as exc:
        print(exc.report, file=sys.stdout if exc.problem else sys.stderr)
        return 1 if exc.problem else 2
    except ValueError as exc:
        print("mpcompat explain: %s" % exc, file=sys.stderr)
        return 2
    from mpcompat.diagnose import explain
    report = explain(obj, name=name, limit=max(1, args.limit))
    print(report)
    return 0 if report.ok else 1
