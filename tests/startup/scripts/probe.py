"""Prints a JSON report of how this process started: mpcompat, the start-up hook, the
sitecustomize that ran, the default start method, and the same for a Python child it starts.
Exits with argv[1] if given."""
import json
import subprocess
import sys


def report():
    """What this interpreter looks like (used for the child as well)."""
    import multiprocessing
    mod = sys.modules.get("mpcompat")
    site_mod = sys.modules.get("sitecustomize")
    return {
        "active": bool(mod is not None and mod.is_active()),
        "mpcompat_file": getattr(mod, "__file__", None),
        "bootstrap_calls": getattr(sys.modules.get("_mpcompat_bootstrap"), "calls", None),
        "sitecustomize": getattr(site_mod, "__file__", None),
        "marker": getattr(sys, "startup_test_marker", None),  # set by the tests' sitecustomize
        "start_method_set": multiprocessing.get_start_method(allow_none=True),
        "default_start_method": multiprocessing.get_start_method(),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        print(json.dumps(report()))
        sys.exit(0)
    child = subprocess.run([sys.executable, __file__, "--child"], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True)
    out = report()
    out["child"] = json.loads(child.stdout)
    print(json.dumps(out))
    sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
