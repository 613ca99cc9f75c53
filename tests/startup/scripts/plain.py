"""A user script that never imports mpcompat: pickles dict views, prints a JSON report."""
import json
import pickle
import sys
from collections import OrderedDict


def main():
    d = {"car": 50, "pedestrian": 40}
    report = {"mpcompat_file": getattr(sys.modules.get("mpcompat"), "__file__", None),
              "bootstrap_calls": getattr(sys.modules.get("_mpcompat_bootstrap"), "calls", None)}
    try:
        views = pickle.loads(pickle.dumps([d.keys(), d.values(), OrderedDict(d).items()]))
        report["result"] = [[type(v).__name__, list(v)] for v in views]
        activation = sys.modules.get("mpcompat.activation")
        report["view_reducer"] = getattr(getattr(activation, "reduce_dict_keys", None),
                                         "__module__", None)
    except Exception as exc:
        report["error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
