"""mpcompat's import hook keeps the import system's manners: callers of find_spec get a chained
loader that passes isinstance() as the real one and reads the real one's files, the module sees
the real loader, a finder put in front of mpcompat's is reported (not hidden). Also pinned: what
importlib.reload of mpcompat's rebuild modules does (breaks pickling views; see patches.md)."""
import json
import sys

import pytest

from testenv import child_env, run_python


def _run(code):
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_find_spec_callers_see_a_loader_that_behaves_as_the_real_one():
    out = _run("""if 1:
    import importlib.machinery, importlib.util, json, sys
    import mpcompat
    assert "multiprocessing.pool" not in sys.modules
    spec = importlib.util.find_spec("multiprocessing.pool")
    real = importlib.machinery.SourceFileLoader
    found = [type(spec.loader) is real, isinstance(spec.loader, real),
             spec.loader.get_filename("multiprocessing.pool") == spec.origin]
    import multiprocessing.pool
    module = sys.modules["multiprocessing.pool"]
    found += [type(module.__loader__) is real, type(module.__spec__.loader) is real]
    rows = {p.name: p.state for p in mpcompat.status().patches}
    print(json.dumps({"loader": found, "state": rows["multiprocessing.pool_workers"]}))
    """)
    assert out["loader"] == [False, True, True, True, True]
    assert out["state"] in ("applied", "not needed")


def test_a_loader_without_an_instance_dict_gets_a_stand_in_that_passes_isinstance():
    out = _run("""if 1:
    import json, sys, types
    import mpcompat
    from mpcompat import activation as importhook
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
    before = hasattr(check, "__wrapped__")
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


def test_reloading_rebuild_views_makes_views_unpicklable():
    """No reload survival: the reloaded module has new functions, the registered reducers still
    hand out the old ones, and pickle refuses those. Pickles already written still load."""
    out = _run("""if 1:
    import importlib, json, pickle
    from collections import OrderedDict
    import mpcompat
    from mpcompat import rebuild, rebuild_views
    from mpcompat.pickling.per_process import rebuild_per_process
    d, od = {"a": 1, "b": 2}, OrderedDict([("a", 1), ("b", 2)])
    views = [d.keys(), d.values(), d.items(), od.keys(), od.values(), od.items()]
    before = [pickle.dumps(v) for v in views]
    old = [getattr(rebuild_views, name) for name in rebuild_views.__all__]
    importlib.reload(rebuild_views)
    importlib.reload(rebuild)
    new = [getattr(rebuild_views, name) for name in rebuild_views.__all__]
    errors = []
    for view in views:
        try:
            pickle.dumps(view)
            errors.append("pickled")
        except pickle.PicklingError as exc:
            errors.append(str(exc).rsplit(" ", 1)[-1] if "not the same object" in str(exc)
                          else str(exc))
    loaded = [repr(pickle.loads(data)) for data in before]
    mpcompat.deactivate()
    try:
        pickle.dumps(d.keys())
        after = "still registered"
    except TypeError:
        after = "unregistered"
    print(json.dumps({"new": [a is not b for a, b in zip(old, new)], "errors": errors,
                      "loaded": loaded, "deactivated": after,
                      "per_process": [rebuild.rebuild_per_process is rebuild_per_process,
                                      "rebuild_per_process" in vars(rebuild)]}))
    """)
    assert out["new"] == [True] * 6
    assert out["errors"] == ["mpcompat.rebuild_views." + name for name in (
        "rebuild_dict_keys", "rebuild_dict_values", "rebuild_dict_items",
        "rebuild_odict_keys", "rebuild_odict_values", "rebuild_odict_items")]
    assert out["loaded"] == [
        "dict_keys(['a', 'b'])", "dict_values([1, 2])", "dict_items([('a', 1), ('b', 2)])",
        "odict_keys(['a', 'b'])", "odict_values([1, 2])", "odict_items([('a', 1), ('b', 2)])"]
    assert out["deactivated"] == "unregistered"
    # mpcompat.rebuild still hands rebuild_per_process out through its module __getattr__
    assert out["per_process"] == [True, False]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="from 3.12, importlib itself takes a "
                    "package's lock again for each submodule imported while the package runs")
def test_importing_mpcompat_never_takes_its_own_import_lock_again():
    """While ``mpcompat`` is being imported, nothing it runs imports through the package itself
    (``from mpcompat import x``, ``import mpcompat.x``), which makes importlib take the package's
    module lock again (``_lock_unlock_module``): on Python 3.8, another thread waiting for that
    lock meanwhile (one whose first ``import pickle`` activates mpcompat from the start-up hook)
    can spin in importlib forever (bpo-38091; 2 hangs in 3,000 runs of
    ``tests/startup/test_startup_lazy.py``'s race on 3.8 before, 0 after; fixed in 3.9's
    importlib). Pinned for the activations that load the patch manager with the package: a
    target imported first, a patch switched off."""
    code = """if 1:
    import importlib._bootstrap as bootstrap, json, os, sys
    import multiprocessing.pool  # a target: the patch manager loads with mpcompat
    taken, lock_unlock = [], bootstrap._lock_unlock_module
    def recorded(name):
        taken.append(name)
        return lock_unlock(name)
    bootstrap._lock_unlock_module = recorded  # what the import system calls, looked up each time
    import mpcompat
    bootstrap._lock_unlock_module = lock_unlock
    print(json.dumps([mpcompat.is_active(), "mpcompat.patching" in sys.modules,
                      [name for name in taken if name.startswith("mpcompat")]]))
    """
    assert _run(code) == [True, True, []]
    proc = run_python(code, env=child_env(MPCOMPAT_DISABLED_PATCHES="torch.cuda_fork"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout) == [True, True, []]
