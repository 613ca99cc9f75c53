"""A user script that never imports mpcompat: sends dict views to a child of the start method
given as argv[1], which sends them back; prints a JSON report."""
import json
import multiprocessing
import sys


def echo(views):
    """Run in the child: return the views (the child pickles them) and whether mpcompat is on."""
    mod = sys.modules.get("mpcompat")
    return views, bool(mod is not None and mod.is_active())


def main():
    d = {"car": 50, "pedestrian": 40}
    report = {}
    try:
        with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
            views, child_active = pool.apply(echo, ([d.keys(), d.values(), d.items()],))
        report["result"] = [[type(v).__name__, list(v)] for v in views]
        report["child_active"] = child_active
    except Exception as exc:
        report["error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
