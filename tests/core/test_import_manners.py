"""mpcompat's import hook keeps the import system's manners: callers of find_spec see the real
loader, a finder put in front of mpcompat's is reported (not hidden), and importlib.reload of
mpcompat's own modules leaves views picklable."""
import json

from testenv import run_python


def _run(code):
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_find_spec_callers_see_the_real_loader():
    out = _run("""if 1:
    import importlib.machinery, importlib.util, json, sys
    import mpcompat
    assert "multiprocessing.pool" not in sys.modules
    spec = importlib.util.find_spec("multiprocessing.pool")
    real = importlib.machinery.SourceFileLoader
    found = [type(spec.loader) is real, isinstance(spec.loader, real)]
    import multiprocessing.pool
    module = sys.modules["multiprocessing.pool"]
    found += [type(module.__loader__) is real, type(module.__spec__.loader) is real]
    rows = {p.name: p.state for p in mpcompat.status().patches}
    print(json.dumps({"loader": found, "state": rows["multiprocessing.pool_workers"]}))
    """)
    assert out["loader"] == [True, True, True, True]
    assert out["state"] in ("applied", "not needed")


def test_a_loader_without_an_instance_dict_gets_a_stand_in_that_passes_isinstance():
    out = _run("""if 1:
    import json, sys, types
    import mpcompat
    from mpcompat import patching as importhook
    import importlib.abc, importlib.machinery

    class SlotLoader(importlib.abc.Loader):
        __slots__ = ()
        def create_module(self, spec):
            return None
        def exec_module(self, module):
            module.value = 41

    class Finder(object):
        def find_spec(self, name, path=None, target=None):
            if name == "slotted_target":
                return importlib.machinery.ModuleSpec(name, SlotLoader())
            return None

    sys.meta_path.append(Finder())
    seen = []
    importhook.watch("slotted_target", lambda m: seen.append(m.value))
    import importlib.util
    spec = importlib.util.find_spec("slotted_target")
    import slotted_target
    print(json.dumps([isinstance(spec.loader, SlotLoader), seen,
                      type(slotted_target.__loader__).__name__]))
    """)
    assert out == [True, [41], "SlotLoader"]


def test_a_finder_put_in_front_is_reported_not_hidden():
    out = _run("""if 1:
    import importlib.machinery, json, sys
    import mpcompat

    class Taker(object):
        '''Another tool's finder, inserted in front of mpcompat's after activation.'''
        def find_spec(self, name, path=None, target=None):
            if name == "multiprocessing.spawn":
                return importlib.machinery.PathFinder.find_spec(name, path, target)
            return None
        def __repr__(self):
            return "<Taker>"

    sys.meta_path.insert(0, Taker())
    import multiprocessing.spawn
    row = [p for p in mpcompat.status().patches if p.name == "multiprocessing.bootstrap_notes"][0]
    again = [p for p in mpcompat.status().patches if p.name == "multiprocessing.bootstrap_notes"][0]
    check = multiprocessing.spawn._check_not_importing_main
    before = getattr(check, "_mpcompat_bootstrap_notes", False)
    mpcompat.activate()
    after = [p.state for p in mpcompat.status().patches
             if p.name == "multiprocessing.bootstrap_notes"][0]
    print(json.dumps([row.state, row.reason, again.state, before, after]))
    """)
    state, reason, again, patched_before, after = out
    assert state == again == "not applied"  # status() reports it, and does not apply it
    assert "multiprocessing.spawn is imported but the patch never saw it" in reason
    assert "<Taker>, ahead of mpcompat's import hook on sys.meta_path, imported it" in reason
    assert "mpcompat.activate() applies it now" in reason
    assert patched_before is False
    assert after == "applied"


def test_reloading_mpcompat_modules_keeps_views_picklable():
    out = _run("""if 1:
    import importlib, json, pickle
    import mpcompat
    from mpcompat import rebuild, rebuild_views
    from mpcompat import pickling as reducers
    results = []
    for module in (rebuild_views, reducers, rebuild, rebuild_views):
        importlib.reload(module)
        view = {"a": 1, "b": 2}.keys()
        results.append(list(pickle.loads(pickle.dumps(view))))
    mpcompat.deactivate()
    try:
        pickle.dumps({}.keys())
        results.append("still registered")
    except TypeError:
        results.append("unregistered")
    print(json.dumps(results))
    """)
    assert out == [["a", "b"]] * 4 + ["unregistered"]
