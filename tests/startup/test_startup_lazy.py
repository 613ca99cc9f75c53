"""Pay on failure at interpreter start, with the wheel's ``mpcompat.pth``: a process that
imports nothing mpcompat acts on loads only the start-up hook; ``MPCOMPAT_DISABLE`` stops the
``.pth`` line before any import; the first import of copyreg loads the reducers and no patch
machinery; multiprocessing's resource tracker loads nothing, its forkserver nothing of its own."""
import ast
import os

import pytest

from mpcompat import patching

MODULES = "import sys; print(sorted(m for m in sys.modules if 'mpcompat' in m))"


@pytest.fixture(scope="module", params=["3.11", "3.8"])
def venv(request, make_venv, wheel_for):
    """A venv of the given Python with the wheel installed (the session's 3.11 one for 3.11)."""
    if request.param == "3.11":
        return request.getfixturevalue("installed")
    return make_venv(request.param, wheel=wheel_for(request.param))


def _modules(venv, code, **env):
    proc = venv.run(["python", "-c", code], **env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [ast.literal_eval(line) for line in proc.stdout.splitlines()]


def test_the_start_up_hook_lists_the_tables_targets(repo):
    boot = {"__name__": "_mpcompat_bootstrap"}
    with open(os.path.join(repo, "mpcompat", "_startup", "_mpcompat_bootstrap.py")) as f:
        exec(compile(f.read(), f.name, "exec"), boot)
    by_env = {}
    for spec in patching.PATCHES:
        by_env.setdefault(spec.needs_env or None, set()).update(spec.targets)
    assert {var: set(names) for var, names in boot["TARGETS"].items()} == by_env


def test_a_process_that_imports_nothing_mpcompat_acts_on_loads_only_the_hook(venv):
    assert _modules(venv, MODULES) == [["_mpcompat_bootstrap"]]
    assert _modules(venv, MODULES, MPCOMPAT_DISABLE="1") == [[]]


def test_copyreg_registers_the_reducers_and_a_target_loads_the_patch_layer(venv):
    # The built-in reducers are activation's: the registry's functions (mpcompat.reducers)
    # load when they are used.
    code = ("import copyreg\n" + MODULES + "\nimport pickle\n"
            "print(list(pickle.loads(pickle.dumps({'a': 1}.keys()))))\n"
            "import multiprocessing.pool\n" + MODULES + "\nimport mpcompat\n"
            "print([cls.__name__ for cls in mpcompat.registered()])\n" + MODULES)
    before, views, after, registered, used = _modules(venv, code)
    assert before == ["_mpcompat_bootstrap", "mpcompat", "mpcompat.activation",
                      "mpcompat.rebuild_views"]
    assert views == ["a"]
    assert after == before[:3] + ["mpcompat.patching"] + before[3:]  # no patch's own module
    assert sorted(registered) == ["dict_items", "dict_keys", "dict_values", "module",
                                  "odict_items", "odict_keys", "odict_values"]
    assert used == after + ["mpcompat.reducers"]


def test_the_resource_tracker_loads_nothing(venv):
    # The command line the tracker is started with, then what it has loaded.
    code = ("from multiprocessing.resource_tracker import main;import _mpcompat_bootstrap as b\n"
            + MODULES + "\nprint([b.outcome])")
    modules, outcome = _modules(venv, code)
    assert modules == ["_mpcompat_bootstrap"]
    assert outcome == ["off in multiprocessing's resource tracker"]


@pytest.mark.parametrize("command", ["from multiprocessing.forkserver import main;",
                                     "import sys; from multiprocessing.forkserver import main;"],
                         ids=["3.8-3.13", "3.14+"])
def test_the_forkserver_loads_nothing_until_a_module_it_preloads_imports_a_trigger(venv,
                                                                                    command):
    # The command line the forkserver is started with (its imports are the triggers copyreg
    # and four multiprocessing modules), then a trigger its preloaded main module imports.
    code = (command + "import _mpcompat_bootstrap as b\n" + MODULES + "\nprint([b.outcome])\n"
            "import multiprocessing.pool\n" + MODULES)
    modules, outcome, after = _modules(venv, code)
    assert modules == ["_mpcompat_bootstrap"]
    assert outcome == ["waiting for the first import of a trigger"]
    assert "mpcompat.patching" in after and "mpcompat.rebuild_views" in after
