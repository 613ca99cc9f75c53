"""Pay on failure at interpreter start, with the wheel's ``mpcompat.pth``: a process that
imports nothing mpcompat acts on loads only the start-up hook; ``MPCOMPAT_DISABLE`` stops the
``.pth`` line before any import; importing re (which imports copyreg) loads nothing more; the
first import of what pickles or copies loads the reducers and no patch machinery, nor does the
import of a standard-library target (its first-use stubs are activation's until the patch layer
loads); multiprocessing's resource tracker loads nothing, its forkserver nothing of its own."""
import ast
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpcompat import patching
from mpcompat.activation import EARLY_FIRST_USES

from test_startup_first_imports import _ours

MODULES = "import sys; print(sorted(m for m in sys.modules if 'mpcompat' in m))"


@pytest.fixture(scope="module", params=["3.11", "3.8"])
def venv(request, make_venv, wheel_for):
    """A venv of the given Python with the wheel installed (the session's 3.11 one for 3.11)."""
    if request.param == "3.11":
        return request.getfixturevalue("installed")
    return make_venv(request.param, wheel=wheel_for(request.param))


def _modules(venv, code, timeout=150, **env):
    proc = venv.run(["python", "-c", code], timeout=timeout, **env)
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


def test_pickle_registers_the_reducers_and_a_first_use_loads_the_patches(venv):
    # re imports copyreg, and so do json, logging and argparse: that activates nothing. What
    # pickles does (pickle here), and registers the built-in reducers, which are activation's:
    # the registry's functions (mpcompat.reducers) load when they are used. The standard
    # library's targets get their first-use stubs from activation: the first call of one (here
    # a Pool) applies the patches of every multiprocessing target imported, without the patch
    # layer.
    code = ("import re, copyreg\n" + MODULES + "\nimport pickle\n" + MODULES + "\n"
            "print(list(pickle.loads(pickle.dumps({'a': 1}.keys()))))\n"
            "import multiprocessing.pool, concurrent.futures.process\n" + MODULES + "\n"
            "print([multiprocessing.pool.Pool.__init__.mpcompat_first_use])\n"
            "with multiprocessing.pool.Pool(1) as pool: print(pool.map(abs, [-1]))\n" + MODULES +
            "\nprint([hasattr(multiprocessing.pool.Pool.__init__, 'mpcompat_first_use')])\n"
            "import mpcompat\nprint([cls.__name__ for cls in mpcompat.registered()])\n" + MODULES)
    with_re, before, views, after, stubbed, mapped, used, unstubbed, registered, registry = (
        _modules(venv, code))
    assert with_re == ["_mpcompat_bootstrap"]
    assert before == ["_mpcompat_bootstrap", "mpcompat", "mpcompat.activation",
                      "mpcompat.rebuild_views"]
    assert views == ["a"]
    assert after == before  # neither the patch layer nor a patch's own module
    assert stubbed == [True] and mapped == [1] and unstubbed == [False]
    assert {"mpcompat.patcher", "mpcompat.patches.mp_pool_workers",
            "mpcompat.patches.mp_children"} <= set(used) - set(after)
    assert "mpcompat.patching" not in used  # the patch manager: below
    assert sorted(registered) == ["dict_items", "dict_keys", "dict_values", "module",
                                  "odict_items", "odict_keys", "odict_values"]
    assert set(registry) - set(used) == {"mpcompat.reducers"}


def test_copy_registers_the_reducers(venv):
    code = "import copy\nprint([type(copy.copy({'a': 1}.keys())).__name__])\n" + MODULES
    copied, modules = _modules(venv, code)
    assert copied == ["dict_keys"] and "mpcompat.activation" in modules


def test_status_adopts_the_stubs_put_on_before_the_patch_layer_loaded(venv):
    """What status() says of the standard library's patches is the same whether their stubs
    were put on by activation (the installed start-up) or by the patch layer (``import
    mpcompat`` first, which loads it), and undoing mpcompat takes them off either way."""
    targets = ", ".join(sorted(EARLY_FIRST_USES))
    code = ("import sys\nif sys.argv[1:] == ['first']: import mpcompat\n"
            "import " + targets + "\nimport mpcompat\n"
            "rows = [(r.name, r.state, r.reason) for r in mpcompat.status().patches]\n"
            "print(sorted(r for r in rows if r[0].startswith(('multiprocessing.', "
            "'concurrent_futures.'))))\nmpcompat.deactivate()\n"
            "import multiprocessing.pool\n"
            "print([hasattr(multiprocessing.pool.Pool.__init__, 'mpcompat_first_use')])")
    early = _modules(venv, "exec(%r)" % code)
    proc = venv.run(["python", "-c", code, "first"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    late = [ast.literal_eval(line) for line in proc.stdout.splitlines()]
    assert early == late
    assert ("multiprocessing.pool_workers", "applied", "on multiprocessing.pool (its code loads "
            "at the first call of Pool.__init__ or worker)") in early[0]
    assert early[1] == [False]


def test_stubs_put_on_early_are_adopted_by_a_first_use_in_another_thread(installed):
    """Threads import the standard library's targets while another calls a first use and
    another imports mpcompat for status(), in 40 fresh processes: nothing hangs (the start-up
    hook activates from inside importlib's global import lock: it lets it go while it imports
    mpcompat, which the status thread is importing too), the first use applies every patch of
    the group, no stub stays on, nothing is lost, no import fails for mpcompat (CPython's own
    import race between multiprocessing's modules is left aside, as in
    test_startup_first_imports)."""
    def run(number):
        proc = installed.script("early_first_use.py", timeout=120)
        out = json.loads(proc.stdout.strip() or "{}") if proc.returncode == 0 else {}
        ours = [e for e in out.get("errors", ["no output"]) if _ours(e)]
        if proc.returncode or proc.stderr or ours or out["stubbed"] or out["lost"]:
            return "run %d: exit %s, %s%s" % (number, proc.returncode, proc.stdout, proc.stderr)
        return out["used"]
    with ThreadPoolExecutor(2) as pool:  # two at a time: this machine's two cores
        results = list(pool.map(run, range(40)))
    bad = [result for result in results if isinstance(result, str)]
    assert bad == [], "%d of 40 runs:\n%s" % (len(bad), "\n".join(bad[:5]))
    assert results.count(True) >= 20  # the first use ran in most


def _standard_patches(venv, *args, **env):
    proc = venv.script("standard_patches.py", *args, timeout=150, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_pool_loads_no_patch_manager_and_status_says_what_it_would(venv, method):
    """A process that makes a Pool and never fails loads no patch manager, nor does a spawn
    worker: the first use (``Pool()``) applies the standard library's patches without it, and
    so do a spawn child's imports of their targets. status() loads it and reports them as the
    manager reports the patches it applied itself (with a patch of another library disabled,
    it does all of it), and deactivate() reverts them."""
    lean, said = _standard_patches(venv, method)
    managed, _ = _standard_patches(venv, method, MPCOMPAT_DISABLED_PATCHES="torch.generator")
    assert said == ""
    assert "mpcompat.patching" not in lean["parent"] + lean["worker"]
    assert {"mpcompat.patcher", "mpcompat.patches.mp_pool_workers"} <= set(lean["worker"])
    assert "mpcompat.patching" in managed["parent"] and "mpcompat.patching" in managed["worker"]
    assert lean["rows"] == managed["rows"]
    assert ["multiprocessing.pool_workers", "applied", "on multiprocessing.pool"] in lean["rows"]
    assert lean["restored"] and managed["restored"]


def test_a_standard_patch_that_declines_without_the_manager_is_said_as_the_manager_says_it(venv):
    """A patch that declines as the first use applies it without the manager (a Python without
    what it hooks) loads the manager then, which says why once, as when it applies the patch
    itself; the others apply."""
    lean, said = _standard_patches(venv, "fork", "decline")
    managed, said_managed = _standard_patches(venv, "fork", "decline",
                                              MPCOMPAT_DISABLED_PATCHES="torch.generator")
    assert said == said_managed and said.count("MpcompatWarning") == 1, said
    assert "patch 'multiprocessing.pickling_notes' skipped" in said
    assert lean["rows"] == managed["rows"]
    assert ["multiprocessing.pickling_notes", "skipped",
            "multiprocessing.reduction has no dump() or ForkingPickler.dumps"] in lean["rows"]
    assert ["multiprocessing.pool_workers", "applied", "on multiprocessing.pool"] in lean["rows"]
    assert "mpcompat.patching" in lean["parent"]


_FAILED_STARTS = r"""import multiprocessing, sys, threading, traceback
import mpcompat
OWN = "mpcompat.workers.user_frames"

def start(process):
    try:
        process.start()
    except AssertionError:  # started twice: raised by the standard library's start()
        return [line for line in traceback.format_exc().splitlines() if "mpcompat" in line]

def standard_library_thread(process):  # a thread of multiprocessing's (a Pool's), as they are
    out.append(start(process))
standard_library_thread.__module__ = "multiprocessing.pool"

process = multiprocessing.get_context("fork").Process(target=int)
process.start()
process.join()
print([process.exitcode, OWN in sys.modules])
out = []
thread = threading.Thread(target=standard_library_thread, args=(process,))
thread.start()
thread.join()
print([bool(out[0]), OWN in sys.modules])
print([start(process), OWN in sys.modules, sys.version_info >= (3, 11)])
"""


def test_what_drops_mpcompats_frames_loads_at_the_first_error_never_in_a_stdlib_thread(venv):
    """A start that succeeds loads nothing that only explains a failure (the user's frames:
    ``mpcompat.workers.user_frames``). A start that raises in the user's thread loads it, and
    its traceback shows no frame of mpcompat's (from 3.11: before, a re-raise restores the
    traceback it caught); in a thread of multiprocessing's (a Pool's helper threads, which
    import nothing: the fork rule) it is not imported, and the error keeps the wrapper's
    frame."""
    started, in_stdlib_thread, (own_frames, loaded, dropped) = _modules(venv, _FAILED_STARTS)
    assert started == [0, False]
    assert in_stdlib_thread == [True, False]
    assert loaded and (own_frames == [] or not dropped), own_frames


def test_threads_starting_the_first_children_at_once_start_each_with_its_channel(installed):
    """As ``tests/child_failures`` checks it, where no patch manager loads: 8 threads start the
    first children at once (``first_starts.py``), and each child is started with its crash
    file named and its pid told to the channel, in 8 fresh processes. Before, 1 child of 8 was
    not, in 5 of 10 processes (it found the standard library's ``start`` between the first-use
    stub taken out and the patch put on)."""
    for run in range(8):
        proc = installed.script("first_starts.py", timeout=150)
        assert proc.returncode == 0, proc.stderr
        known, codes = json.loads(proc.stdout)
        assert known == [True] * 8 and codes == [3] * 8, (run, known, codes, proc.stderr)


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
    # The command line the forkserver is started with (its imports are the triggers pickle,
    # _pickle and four multiprocessing modules), then a trigger its preloaded main module imports.
    code = (command + "import _mpcompat_bootstrap as b\n" + MODULES + "\nprint([b.outcome])\n"
            "import multiprocessing.pool\n" + MODULES)
    modules, outcome, after = _modules(venv, code)
    assert modules == ["_mpcompat_bootstrap"]
    assert outcome == ["waiting for the first import of a trigger"]
    assert "mpcompat.activation" in after and "mpcompat.rebuild_views" in after


def test_a_thread_importing_mpcompat_while_another_activates_it_never_hangs(venv):
    """One thread's first import of what pickles activates mpcompat from the start-up hook's
    find_spec, which importlib calls holding its global import lock, while another thread
    imports mpcompat itself, in 40 fresh processes, each bounded: none may hang (the hook lets
    the lock go while it imports mpcompat; held, 23 of 40 hung on 3.11)."""
    code = ("import sys, threading\nsys.setswitchinterval(1e-6)\n"
            "assert 'mpcompat' not in sys.modules and 'pickle' not in sys.modules\n"
            "barrier = threading.Barrier(2)\n"
            "def run(name):\n    barrier.wait()\n    __import__(name)\n"
            "threads = [threading.Thread(target=run, args=(n,)) for n in ('pickle', 'mpcompat')]\n"
            "[t.start() for t in threads]\n[t.join() for t in threads]\n"
            "import mpcompat\nprint([mpcompat.is_active()])\n")

    def run(number):
        try:
            return _modules(venv, code, timeout=30) == [[True]] or "run %d: inactive" % number
        except subprocess.TimeoutExpired:
            return "run %d hung for 30 s" % number
    with ThreadPoolExecutor(2) as pool:  # two at a time: this machine's two cores
        bad = [result for result in pool.map(run, range(40)) if result is not True]
    assert bad == [], bad
