"""torch.boolean_dispatch on real torch (1.9.1 and 2.13), in this process, in spawn children and
in fresh interpreters.

F.max_pool2d and the other functions made by boolean_dispatch pickle by reference (identical
objects in children), each named at birth as torch intends; TorchScript and FX keep working;
functions made later, anywhere, pickle at once; reload, deactivate and activate; the first
report (torch.multiprocessing.spawn with a model keeping F.adaptive_max_pool2d).
"""
import importlib
import pickle
import re
import sys
import textwrap
import weakref
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.functional
import torch.fx  # torch < 2 does not import torch.fx with torch
import torch.nn.functional as F
from torch._jit_internal import boolean_dispatch, boolean_dispatched

import mpcompat
import torch_workers
from mpcompat.patches import torch_boolean_dispatch
from testenv import child_env, run_python

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
ORIGINAL_QUALNAME = "boolean_dispatch.<locals>.fn"
# 3.8-3.12 "pickle", 3.13 "get"; from 3.14 the object's repr instead of its quoted qualname.
LOCAL_OBJECT_ERROR = re.compile(r"Can't (pickle|get) local object "
                                r"('boolean_dispatch.<locals>.fn'|<function boolean_dispatch"
                                r".<locals>.fn at 0x)")
PUBLIC = [
    (F, "max_pool1d"), (F, "max_pool2d"), (F, "max_pool3d"),
    (F, "adaptive_max_pool1d"), (F, "adaptive_max_pool2d"), (F, "adaptive_max_pool3d"),
    (F, "fractional_max_pool2d"), (F, "fractional_max_pool3d"),
    (torch.functional, "unique"), (torch.functional, "unique_consecutive"),
    (torch.functional, "lu"),
]


def public_functions():
    return [getattr(module, name) for module, name in PUBLIC]


def test_public_dispatchers_pickle_by_reference():
    for fn in public_functions():
        assert fn in boolean_dispatched
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(fn, protocol)) is fn
        assert pickle.loads(ForkingPickler.dumps(fn)) is fn
    assert pickle.loads(pickle.dumps(torch.unique)) is torch.unique  # torch re-exports it


def test_every_dispatcher_is_named_as_torch_intends():
    seen = 0
    for fn in list(boolean_dispatched):
        assert fn.__qualname__ == fn.__name__, fn  # func_name, given by every caller in torch
        seen += 1
    assert seen >= len(PUBLIC)
    # torch.functional's intermediate dispatchers carry the func_name "unique" too, while
    # torch.functional.unique is another function: pickle refuses them, clearly.
    inner = torch.functional._return_inverse_true
    assert inner.__name__ == inner.__qualname__ == "unique"
    with pytest.raises(pickle.PicklingError, match="not the same object as "
                                                   "torch.functional.unique"):
        pickle.dumps(inner)


def test_dispatchers_reach_spawn_children_as_the_same_objects(spawn_pool):
    entries = [(module.__name__, name, getattr(module, name)) for module, name in PUBLIC]
    assert spawn_pool.apply(torch_workers.identity_in_child, (entries,)) == [True] * len(PUBLIC)
    funcs = public_functions()
    back = spawn_pool.apply(torch_workers.returned_with_mpcompat, (funcs,))
    assert all(got is fn for got, fn in zip(back, funcs))


def test_torchscript_and_fx_keep_working():
    model = torch_workers.ScriptablePooling()
    x = torch.arange(64, dtype=torch.float32).reshape(1, 1, 8, 8) % 7
    expected = model(x)
    for compiled in (torch.jit.script(model), torch.fx.symbolic_trace(model)):
        got = compiled(x)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert torch.equal(a, b)


USER_MODULES = {
    # public and intermediate dispatchers in one module, as torch.functional has them
    "mpc_bd_a": """
        from torch._jit_internal import boolean_dispatch
        def _true(x, flag=False): return ("true", x)
        def _false(x, flag=False): return ("false", x)
        _inner = boolean_dispatch("flag", 1, False, _true, _false, __name__, "pool")
        pool = boolean_dispatch("flag", 1, False, _inner, _false, __name__, "pool")
        anonymous = boolean_dispatch("flag", 1, False, _true, _false, __name__, None)
    """,
    # made in one module for another that is in the middle of importing it
    "mpc_bd_b": "from mpc_bd_c import shared",
    "mpc_bd_c": """
        from torch.nn.functional import boolean_dispatch
        def _true(x, flag=False): return 1
        def _false(x, flag=False): return 0
        shared = boolean_dispatch("flag", 1, False, _true, _false, "mpc_bd_b", "shared")
    """,
    # made for a module that is not imported yet
    "mpc_bd_d": """
        from torch._jit_internal import boolean_dispatch
        def _true(x, flag=False): return 1
        def _false(x, flag=False): return 0
        later = boolean_dispatch("flag", 1, False, _true, _false, "mpc_bd_e", "later")
    """,
    "mpc_bd_e": "from mpc_bd_d import later",
}


@pytest.fixture
def user_modules(tmp_path):
    for name, source in USER_MODULES.items():
        (tmp_path / (name + ".py")).write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    for name in USER_MODULES:
        sys.modules.pop(name, None)


def test_dispatchers_made_after_activation_are_named_at_birth(user_modules):
    import mpc_bd_a
    import mpc_bd_b
    import mpc_bd_d
    assert mpc_bd_a._inner.__qualname__ == mpc_bd_a.pool.__qualname__ == "pool"
    assert mpc_bd_a.anonymous.__qualname__ == ORIGINAL_QUALNAME  # no func_name: left alone
    assert mpc_bd_b.shared.__qualname__ == "shared"
    assert mpc_bd_d.later.__qualname__ == "later"  # for mpc_bd_e, which is not imported yet
    import mpc_bd_e
    for fn in (mpc_bd_a.pool, mpc_bd_b.shared, mpc_bd_e.later):
        assert pickle.loads(pickle.dumps(fn)) is fn
    with pytest.raises(pickle.PicklingError, match="not the same object as mpc_bd_a.pool"):
        pickle.dumps(mpc_bd_a._inner)
    # Made at run time and bound at its declared name: pickles at once, by reference.
    mpc_bd_a.made_late = boolean_dispatch("flag", 1, False, mpc_bd_a._true, mpc_bd_a._false,
                                          "mpc_bd_a", "made_late")
    assert pickle.loads(pickle.dumps(mpc_bd_a.made_late)) is mpc_bd_a.made_late
    assert mpc_bd_a.made_late in torch_boolean_dispatch.renamed()


def test_deactivate_restores_qualnames_and_activate_renames(restore_mpcompat, user_modules):
    import mpc_bd_a
    named = public_functions() + [mpc_bd_a.pool]
    table_type = type(boolean_dispatched)
    mpcompat.deactivate()
    assert type(boolean_dispatched) is weakref.WeakKeyDictionary
    for fn in named:
        assert fn.__qualname__ == ORIGINAL_QUALNAME
    with pytest.raises((AttributeError, pickle.PicklingError), match=LOCAL_OBJECT_ERROR):
        pickle.dumps(F.max_pool2d)
    mpcompat.deactivate()  # idempotent
    mpcompat.activate()
    mpcompat.activate()
    assert type(boolean_dispatched) is table_type
    for fn in named:
        assert pickle.loads(pickle.dumps(fn)) is fn


def test_applying_again_changes_nothing():
    qualnames = [fn.__qualname__ for fn in boolean_dispatched]
    table_type = type(boolean_dispatched)
    torch_boolean_dispatch.apply(torch._jit_internal)
    torch_boolean_dispatch.apply(torch._jit_internal)
    assert [fn.__qualname__ for fn in boolean_dispatched] == qualnames
    assert type(boolean_dispatched) is table_type is not weakref.WeakKeyDictionary


# --- in fresh interpreters --------------------------------------------------------------------

IMPORT_ORDER_SCRIPT = r"""
import importlib, pickle, sys
if sys.argv[1] == "mpcompat first":
    import mpcompat
    assert "torch" not in sys.modules
import torch
import torch.nn.functional as F
if sys.argv[1] == "torch first":
    import mpcompat

def same(fn):
    return pickle.loads(pickle.dumps(fn)) is fn

assert same(F.max_pool2d) and same(F.adaptive_max_pool2d) and same(torch.unique)
status = mpcompat.status()
row = [p for p in status.patches if p.name == "torch.boolean_dispatch"][0]
print("STATE", row.state, row.version)
print(status)

# importlib.reload: torch itself refuses to re-run its modules ("function 'conv1d' already
# has a docstring"); the patch must survive that failed reload ...
old = F.max_pool2d
try:
    importlib.reload(F)
except RuntimeError as exc:
    print("RELOAD REFUSED", exc)
assert F.max_pool2d is old and same(old)
# ... and a reload that works: let torch's _add_docstr tolerate documented functions.
add_docstr = torch._C._add_docstr
def tolerant(obj, doc):
    try:
        return add_docstr(obj, doc)
    except RuntimeError:
        return obj
torch._C._add_docstr = tolerant
importlib.reload(F)
if int(torch.__version__.split(".")[0]) < 2:
    # torch 1.x's functional.py ends with "del torch.unique_dim" (a name torch/__init__.py
    # copied from torch._C._VariableFunctions): running it again needs the name back.
    torch.unique_dim = torch._C._VariableFunctions.unique_dim
importlib.reload(torch.functional)
assert F.max_pool2d is not old and same(F.max_pool2d) and same(torch.functional.unique)
try:  # its name now holds another function: pickle says so
    pickle.dumps(old)
    raise AssertionError("the old function pickled")
except pickle.PicklingError as exc:
    assert "not the same object" in str(exc), exc
x = torch.randn(1, 1, 4, 4)
assert torch.equal(F.max_pool2d(x, 2), old(x, 2))

mpcompat.deactivate()
assert F.max_pool2d.__qualname__ == "boolean_dispatch.<locals>.fn"
mpcompat.activate()
assert same(F.max_pool2d)
print("OK")
"""


@pytest.mark.parametrize("order", ["mpcompat first", "torch first"])
def test_import_order_status_reload_and_reactivation(order):
    proc = run_python(IMPORT_ORDER_SCRIPT, order, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "STATE applied %s" % torch.__version__ in proc.stdout
    assert re.search(r"torch\.boolean_dispatch\s+applied\s+torch %s" % re.escape(torch.__version__),
                     proc.stdout)
    assert "RELOAD REFUSED function 'conv1d' already has a docstring" in proc.stdout
    assert proc.stdout.rstrip().endswith("OK")
    assert "MpcompatWarning" not in proc.stderr, proc.stderr


DISABLED_SCRIPT = r"""
import pickle
import mpcompat
import torch.nn.functional as F
try:
    pickle.dumps(F.max_pool2d)
except Exception as exc:
    print("ERROR %s: %s" % (type(exc).__name__, exc))
print({p.name: p.state for p in mpcompat.status().patches})
"""


def test_disabled_patch_leaves_the_original_error():
    env = child_env(MPCOMPAT_DISABLED_PATCHES="torch.boolean_dispatch")
    proc = run_python(DISABLED_SCRIPT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert LOCAL_OBJECT_ERROR.search(proc.stdout), proc.stdout
    states = eval(proc.stdout.splitlines()[-1])
    assert states["torch.boolean_dispatch"] == "disabled"
    assert states["torch.generator"] == "applied"
    if TORCH_2:
        assert states["torch.safe_globals"] == "applied"
    else:  # torch < 2.4 has no safe globals to extend (weights_only loading came later)
        assert states["torch.safe_globals"] == "not needed"


# --- the first report: torch.multiprocessing.spawn with a model keeping F.adaptive_max_pool2d ---

SCENARIO = "mpcompat.demo.scenario_torch_pool"


def test_first_report_torch_multiprocessing_spawn():
    """The demo scenario, run here: two spawned processes compute the parent's output."""
    scenario = importlib.import_module(SCENARIO)
    assert "computed the parent's output" in scenario.run()


def test_demo_scenario_fails_without_mpcompat():
    from mpcompat.cli import demo
    ok, summary, output = demo.run_scenario(SCENARIO, "without")
    assert not ok and LOCAL_OBJECT_ERROR.search(summary), output


INTERPRETERS = r'''
import json, pickle
import mpcompat
import torch.nn.functional as F
from concurrent.futures import InterpreterPoolExecutor
import diagnose_workers as w
same = pickle.loads(pickle.dumps(F.adaptive_max_pool2d)) is F.adaptive_max_pool2d
with InterpreterPoolExecutor(1) as ex:
    exc = ex.submit(w.echo, F.adaptive_max_pool2d).exception(timeout=60)
chain = []
while exc is not None:
    chain.append("%s: %s" % (type(exc).__name__, exc))
    chain.extend(getattr(exc, "__notes__", ()))
    exc = exc.__cause__
print("RESULT " + json.dumps({"same": same, "chain": chain}))
'''


@pytest.mark.skipif(sys.version_info < (3, 14), reason="InterpreterPoolExecutor is new in 3.14")
def test_interpreter_pool_sends_by_reference_and_torch_refuses_subinterpreters():
    """F.adaptive_max_pool2d pickles by reference for a subinterpreter too; there, torch itself
    cannot be imported (its C extension does not support subinterpreters), and the error says
    so: no mpcompat note blames the pickle."""
    result = run_python(INTERPRETERS, timeout=180)
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, result.stdout + result.stderr
    import json
    data = json.loads(line[0][len("RESULT "):])
    assert data["same"] is True
    chain = "\n".join(data["chain"])
    assert data["chain"][0].startswith("NotShareableError: ")
    assert "does not support loading in subinterpreters" in chain, chain
    assert "mpcompat: " not in chain  # (its import hook shows in the traceback text)
