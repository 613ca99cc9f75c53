"""Activation: ``import mpcompat`` activates; activate()/deactivate() do and undo exactly;
MPCOMPAT_DISABLE; what the import loads; status() and ``python -m mpcompat status``."""
import copyreg
import os
import pickle
import random
import shutil
import subprocess
import sys
import threading
import warnings

import pytest

import mpcompat
from mpcompat import activation
from testenv import REPO, child_env, race, run_python
from workers import VIEW_KINDS, make_view, view_types

TYPES = view_types()
BUILTIN = activation.builtin_reducers()
MODULE_TYPE = type(sys)


def _hook_installed():
    return any(type(f).__name__ == "_PostImportFinder" for f in sys.meta_path)


def test_builtin_reducers_are_the_six_views_and_modules():
    assert set(BUILTIN) == set(TYPES.values()) | {MODULE_TYPE}


def test_import_activates():
    assert mpcompat.is_active()
    for cls, red in BUILTIN.items():
        assert copyreg.dispatch_table[cls] is red
        assert mpcompat.registered()[cls] is red
    assert _hook_installed()  # the library patches are armed


def test_activate_is_idempotent(restore_mpcompat):
    mpcompat.activate()
    once = dict(copyreg.dispatch_table)
    registered = dict(mpcompat.registered())
    mpcompat.activate()
    mpcompat.activate()
    assert dict(copyreg.dispatch_table) == once
    assert dict(mpcompat.registered()) == registered
    assert mpcompat.is_active()


def test_deactivate_undoes_exactly(restore_mpcompat):
    mpcompat.deactivate()
    assert not mpcompat.is_active()
    found = dict(copyreg.dispatch_table)
    assert not set(BUILTIN) & set(found)
    assert not _hook_installed()
    for kind in VIEW_KINDS:
        with pytest.raises(TypeError, match=kind):
            pickle.dumps(make_view(kind, [(1, 2)]))
    mpcompat.deactivate()  # idempotent too
    assert dict(copyreg.dispatch_table) == found
    mpcompat.activate()
    mpcompat.activate()
    assert pickle.loads(pickle.dumps(make_view("dict_keys", [(1, 2)]))) is not None
    mpcompat.deactivate()
    assert dict(copyreg.dispatch_table) == found
    assert dict(mpcompat.registered()) == {}
    assert not _hook_installed()


def test_deactivate_restores_the_table_found_before_import():
    code = """if 1:
    import copyreg, sys
    before = dict(copyreg.dispatch_table)
    hooks = list(sys.meta_path)
    import mpcompat
    assert mpcompat.is_active() and dict(copyreg.dispatch_table) != before
    mpcompat.deactivate()
    print(dict(copyreg.dispatch_table) == before, sys.meta_path == hooks,
          dict(mpcompat.registered()))
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "{}"]


def test_deactivate_keeps_user_reducers(restore_mpcompat):
    class Mine(object):
        pass

    def reduce_mine(obj):
        return Mine, ()

    def my_keys_reducer(view):
        return list, (list(view),)

    mpcompat.register(Mine, reduce_mine)
    mpcompat.register(TYPES["dict_keys"], my_keys_reducer, override=True)
    mpcompat.deactivate()
    assert copyreg.dispatch_table[Mine] is reduce_mine
    assert copyreg.dispatch_table[TYPES["dict_keys"]] is my_keys_reducer  # a user override
    assert TYPES["dict_values"] not in copyreg.dispatch_table
    assert pickle.loads(pickle.dumps({1: 2}.keys())) == [1]


def test_activation_leaves_another_packages_view_reducer_alone(restore_mpcompat):
    def foreign(view):
        return tuple, (tuple(view),)

    mpcompat.deactivate()
    copyreg.pickle(TYPES["dict_keys"], foreign)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mpcompat.activate()
    assert [w for w in caught if issubclass(w.category, mpcompat.MpcompatWarning)
            and "dict_keys" in str(w.message)]
    assert copyreg.dispatch_table[TYPES["dict_keys"]] is foreign
    assert copyreg.dispatch_table[TYPES["dict_values"]] is BUILTIN[TYPES["dict_values"]]
    assert pickle.loads(pickle.dumps({1: 2}.keys())) == (1,)
    text = str(mpcompat.status())
    assert "builtins.dict_keys" in text and "another package" in text
    mpcompat.deactivate()
    assert copyreg.dispatch_table[TYPES["dict_keys"]] is foreign
    del copyreg.dispatch_table[TYPES["dict_keys"]]


def test_concurrent_activate_and_deactivate(restore_mpcompat):
    mpcompat.deactivate()
    found = dict(copyreg.dispatch_table)
    n_threads = 6
    barrier = threading.Barrier(n_threads)
    errors = []

    def toggle(seed):
        rng = random.Random(seed)
        barrier.wait()
        for _ in range(200):
            try:
                (mpcompat.activate if rng.random() < 0.5 else mpcompat.deactivate)()
            except Exception as exc:
                errors.append(exc)

    threads = [threading.Thread(target=toggle, args=(i,)) for i in range(n_threads)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        race(threads)
    assert errors == []
    assert not [str(w.message) for w in caught
                if issubclass(w.category, mpcompat.MpcompatWarning)]
    # the end state is one of the two consistent ones, whichever call came last
    table = dict(copyreg.dispatch_table)
    if mpcompat.is_active():
        assert all(table[c] is r for c, r in BUILTIN.items())
        assert {c: r for c, r in table.items() if c not in BUILTIN} == found
    else:
        assert table == found
    mpcompat.activate()
    assert all(copyreg.dispatch_table[c] is r for c, r in BUILTIN.items())
    mpcompat.deactivate()
    assert dict(copyreg.dispatch_table) == found


# --- MPCOMPAT_DISABLE and a fresh import ----------------------------------------------------

_DISABLED_CHILD = """
import copyreg, pickle, sys
before = dict(copyreg.dispatch_table)
import mpcompat
print("active", mpcompat.is_active())
print("copyreg_unchanged", dict(copyreg.dispatch_table) == before)
print("registered", len(mpcompat.registered()))
print("hook", any(type(f).__module__.startswith("mpcompat") for f in sys.meta_path))
print("patches", sorted({p.state for p in mpcompat.status().patches}))
try:
    pickle.dumps({1: 2}.keys())
    print("pickles_view True")
except TypeError:
    print("pickles_view False")
print("status_before", str(mpcompat.status()).splitlines()[0])

class Box(object):
    pass

mpcompat.register(Box, lambda box: (Box, ()))
print("register_works", pickle.loads(pickle.dumps(Box())).__class__ is Box
      and Box in mpcompat.registered())
mpcompat.activate()
print("after_activate", mpcompat.is_active(), list(pickle.loads(pickle.dumps({1: 2}.keys()))))
print("status_after", str(mpcompat.status()).splitlines()[0])
"""


def _parse(stdout):
    return dict(line.split(" ", 1) for line in stdout.splitlines())


@pytest.mark.parametrize("value", ["1", "true"])
def test_mpcompat_disable_registers_and_patches_nothing(value):
    proc = run_python(_DISABLED_CHILD, env=child_env(MPCOMPAT_DISABLE=value))
    assert proc.returncode == 0, proc.stderr
    out = _parse(proc.stdout)
    assert out["active"] == "False"
    assert out["copyreg_unchanged"] == "True"
    assert out["registered"] == "0"
    assert out["hook"] == "False"
    assert out["patches"] == "['inactive']"
    assert out["pickles_view"] == "False"
    assert out["register_works"] == "True"
    assert out["after_activate"] == "True [1]"
    assert out["status_before"].endswith(
        ": inactive in this process, off: MPCOMPAT_DISABLE=%s is set" % value)
    assert out["status_after"].endswith(
        ": active in this process only, activated by mpcompat.activate()")


def test_without_mpcompat_disable_import_activates():
    proc = run_python(_DISABLED_CHILD, env=child_env(MPCOMPAT_DISABLE="0"))
    assert proc.returncode == 0, proc.stderr
    out = _parse(proc.stdout)
    assert (out["active"], out["copyreg_unchanged"], out["hook"]) == ("True", "False", "True")
    assert out["registered"] == str(len(BUILTIN))
    assert out["pickles_view"] == "True"


HEAVY = ["wrapt", "torch", "numpy", "importlib.metadata", "asyncio"]


def test_import_loads_no_heavy_module():
    code = """if 1:
    import sys
    import mpcompat, pickle
    pickle.loads(pickle.dumps({"a": 1}.keys()))  # the reducers register with copyreg
    assert mpcompat.is_active()
    heavy = %r
    print(sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy))
    """ % (HEAVY,)
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_multiprocessing_patches_import_no_module_of_the_standard_librarys_own():
    """Every process that imports multiprocessing (a Process child) arms its patches: that loads
    no module of the standard library that multiprocessing does not load itself (traceback and
    its linecache, tokenize and textwrap cost a few milliseconds); a patch's own module loads at
    the first use of what it hooks."""
    code = """if 1:
    import sys
    if sys.argv[1] == "on":
        import mpcompat
    import multiprocessing.resource_tracker, multiprocessing.popen_fork
    assert ("mpcompat.patching" in sys.modules) == (sys.argv[1] == "on")
    print(" ".join(sorted(m for m in sys.modules if "mpcompat" not in m)))
    """
    loaded = {}
    for mode in ("on", "off"):
        proc = run_python(code, mode)
        assert proc.returncode == 0, proc.stderr
        loaded[mode] = set(proc.stdout.split())
    assert loaded["on"] - loaded["off"] == set()


def test_heavy_module_check_can_fail():
    """The check above sees a heavy module when one is loaded."""
    proc = run_python("import sys, asyncio, mpcompat; print('asyncio' in sys.modules)")
    assert proc.stdout.strip() == "True"


def test_start_up_defers_copyreg_registry_and_patch_modules():
    """``import mpcompat`` from a source checkout (no start-up hook to list the targets) loads
    the activation (with the built-in reducers and the rebuild functions they name) and the
    patch layer with its table (and ``mpcompat.patcher``, whose Patcher it re-exports); the reducers register as copyreg is imported, which loads no
    module more (the registry's functions wait for their first use), and a patch's own module
    waits for the first use of what it hooks."""
    code = """if 1:
    import sys
    import mpcompat
    print(sorted(m for m in sys.modules if m.startswith("mpcompat") or m == "copyreg"))
    import pickle  # imports copyreg: the built-in reducers are registered right then
    print(type(pickle.loads(pickle.dumps({"a": 1}.keys()))).__name__)
    print("mpcompat.reducers" in sys.modules)
    import multiprocessing.reduction  # a patch target: the manager arms the patches
    print("mpcompat.patches.mp_children" in sys.modules)
    rows = {p.name: p.state for p in mpcompat.status().patches}
    print("multiprocessing.pickling_notes", rows["multiprocessing.pickling_notes"])
    multiprocessing.reduction.ForkingPickler.dumps(1)  # its first use
    print("mpcompat.patches.mp_children" in sys.modules)
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert eval(lines[0]) == ["mpcompat", "mpcompat.activation", "mpcompat.patcher",
                              "mpcompat.patching", "mpcompat.rebuild_views"]
    assert lines[1:] == ["dict_keys", "False", "False", "multiprocessing.pickling_notes applied",
                         "True"]


def test_deactivate_before_copyreg_is_imported_registers_nothing_later():
    code = """if 1:
    import sys
    import mpcompat
    mpcompat.deactivate()
    import copy
    try:
        copy.copy({"a": 1}.keys())
    except TypeError as exc:
        print("TypeError", exc)
    print(dict(mpcompat.registered()))
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["TypeError cannot pickle 'dict_keys' object", "{}"]


def test_registered_before_copyreg_is_imported_lists_the_builtins():
    proc = run_python("import mpcompat; print(sorted(t.__name__ for t in mpcompat.registered()))")
    assert proc.returncode == 0, proc.stderr
    assert eval(proc.stdout) == sorted(
        ["dict_items", "dict_keys", "dict_values", "module", "odict_items", "odict_keys",
         "odict_values"])


def test_unknown_name_in_disabled_patches_variable_warns_and_keeps_the_rest():
    code = """if 1:
    import warnings
    warnings.simplefilter("always")
    import mpcompat
    import pickle
    rows = {p.name: p.state for p in mpcompat.status().patches}
    print(mpcompat.is_active(), rows["torch.generator"],
          type(pickle.loads(pickle.dumps({}.keys()))).__name__)
    """
    proc = run_python(code, env=child_env(MPCOMPAT_DISABLED_PATCHES="torch.generator,no.such"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "disabled", "dict_keys"]
    assert "MPCOMPAT_DISABLED_PATCHES: unknown patch name 'no.such' ignored" in proc.stderr


# --- status ---------------------------------------------------------------------------------

def test_status_summary(restore_mpcompat):
    class UserThing(object):
        pass

    def reduce_user_thing(obj):
        return UserThing, ()

    mpcompat.register(UserThing, reduce_user_thing)
    report = mpcompat.status()
    assert report.active is True and report.how == report.reason
    assert set(report.builtin) == set(BUILTIN)
    assert report.reducers[UserThing] is reduce_user_thing
    text = str(report)
    first = text.splitlines()[0]
    assert first.startswith("mpcompat %s: active in this process" % mpcompat.__version__)
    for cls, red in BUILTIN.items():
        line = [l for l in text.splitlines() if ("builtins.%s " % cls.__name__) in l]
        assert len(line) == 1 and "built-in" in line[0]
        assert "%s.%s" % (red.__module__, red.__qualname__) in line[0]
    user = [l for l in text.splitlines() if "UserThing" in l]
    assert len(user) == 1 and " user " in user[0] and "reduce_user_thing" in user[0]
    assert "patches:" in text

    mpcompat.deactivate()
    text = str(mpcompat.status())
    assert text.splitlines()[0].endswith(
        ": inactive in this process, deactivated by mpcompat.deactivate()")
    assert "reduce_dict_keys" not in text and "reduce_user_thing" in text


def test_python_m_mpcompat_status():
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "status"], env=child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("mpcompat %s: active in this process only, activated by the mpcompat "
                        "command itself" % mpcompat.__version__)
    assert lines[1].startswith("auto-activation at interpreter start: not installed: ")
    for cls, red in BUILTIN.items():
        assert any(("builtins.%s " % cls.__name__) in l and red.__name__ in l for l in lines)
    assert "patches:" in lines

    disabled = subprocess.run([sys.executable, "-m", "mpcompat", "status"],
                              env=child_env(MPCOMPAT_DISABLE="1"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, cwd=REPO,
                              timeout=120)
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout.splitlines()[0].endswith(
        ": inactive in this process, off: MPCOMPAT_DISABLE=1 is set")
    assert "  (none: mpcompat is off)" in disabled.stdout.splitlines()


def test_a_typo_warning_under_w_error_is_one_line_and_mpcompat_stays_on():
    code = "import mpcompat, pickle; print(mpcompat.is_active(), pickle.loads(pickle.dumps({1: 2}.keys())))"
    proc = run_python(code, env=child_env(MPCOMPAT_DISABLED_PATCHES="torch.boolean-dispach",
                                          PYTHONWARNINGS="error"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True dict_keys([1])"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "MpcompatWarning: mpcompat: MPCOMPAT_DISABLED_PATCHES: unknown patch name "
        "'torch.boolean-dispach' ignored (did you mean torch.boolean_dispatch?)"), proc.stderr
    assert "broken" not in proc.stderr


TYPO = "torch.boolean-dispach"
RAISING_HOOK = ("import warnings\n"
                "def hook(*args, **kwargs):\n"
                "    raise RuntimeError('a showwarning hook that raises')\n"
                "warnings.showwarning = hook\n")


@pytest.mark.parametrize("how", ["-W error", "PYTHONWARNINGS=error", "raising showwarning"])
def test_a_warning_at_import_never_turns_mpcompat_off_nor_raises(how):
    # A typo in MPCOMPAT_DISABLED_PATCHES is a warning; however the user's warnings machinery
    # treats it, mpcompat stays on, says it once as a warning line and never calls itself broken.
    code = "import mpcompat; print(mpcompat.is_active(), mpcompat.status().how)"
    argv = [sys.executable]
    env = child_env(MPCOMPAT_DISABLED_PATCHES=TYPO)
    if how == "-W error":
        argv += ["-W", "error"]
    elif how == "PYTHONWARNINGS=error":
        env["PYTHONWARNINGS"] = "error"
    else:
        code = RAISING_HOOK + code
    proc = subprocess.run(argv + ["-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True activated by import mpcompat\n", proc.stderr
    assert proc.stderr.count(repr(TYPO)) == 1, proc.stderr
    assert proc.stderr.startswith(
        "MpcompatWarning: mpcompat: MPCOMPAT_DISABLED_PATCHES: unknown patch name %r "
        "ignored (did you mean torch.boolean_dispatch?)" % TYPO), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "broken" not in proc.stderr and "reinstall" not in proc.stderr


def test_status_names_the_start_up_file_this_python_runs(tmp_path):
    """Python 3.15 runs ``mpcompat.start`` and ignores the import line of ``mpcompat.pth``;
    before 3.15 only the .pth exists for it."""
    from mpcompat import autostart
    startup = os.path.join(REPO, "mpcompat", "_startup")
    shutil.copy(os.path.join(startup, autostart.PTH_NAME), str(tmp_path))
    assert autostart.hook_file(str(tmp_path)) == str(tmp_path / autostart.PTH_NAME)
    shutil.copy(os.path.join(startup, autostart.START_NAME), str(tmp_path))
    expected = autostart.START_NAME if sys.version_info >= (3, 15) else autostart.PTH_NAME
    assert autostart.hook_file(str(tmp_path)) == str(tmp_path / expected)
