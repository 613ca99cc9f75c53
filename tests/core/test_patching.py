"""The patch machinery: table, lenient versions, import hook, manager, status, command line.

Torch-free and library-free: the patches under test are entries added to mpcompat's own table
(``patching.PATCHES``) that point at the tiny patch modules and target modules in
``tests/patchkit``. Tests with the real nuscenes-devkit patches live in ``tests/old_stack``.
"""
import importlib
import json
import os
import platform
import subprocess
import sys
import warnings
from contextlib import contextmanager

import pytest

import mpcompat
from mpcompat import MpcompatWarning, PatchUnavailable
from mpcompat import patching
from mpcompat.patching import PatchSpec

from testenv import REPO, child_env, run_python

ALPHA, BETA = "patchkit.target_alpha", "patchkit.target_beta"
PYTHON = platform.python_version()


def _pytest_version():
    from importlib import metadata
    return metadata.version("pytest")


@pytest.fixture
def add_patch(monkeypatch):
    """Return ``add(name, **fields)``, which adds a PatchSpec to a table of the test's own.

    mpcompat is deactivated first: the table is read when activate() is called (the test
    calls it). Afterwards the table, the environment, the patchkit targets and mpcompat's
    activation are put back as they were.
    """
    was_active = mpcompat.is_active()
    mpcompat.deactivate()
    monkeypatch.delenv("MPCOMPAT_DISABLED_PATCHES", raising=False)
    monkeypatch.setenv("MPCOMPAT_WARNED", "")  # each test starts a fresh "process tree"
    monkeypatch.setattr(patching, "PATCHES", patching.PATCHES)
    _drop_targets()

    def add(name, target=ALPHA, impl="patchkit.good", distributions=(), supported=""):
        spec = PatchSpec(name=name, targets=(target,), distributions=distributions,
                         supported=supported, impl=impl,
                         summary="test patch %s" % name)
        patching.PATCHES = patching.PATCHES + (spec,)
        return spec
    yield add
    mpcompat.deactivate()
    monkeypatch.undo()
    _drop_targets()
    if was_active:
        mpcompat.activate()


def _drop_targets():
    for name in (ALPHA, BETA):
        sys.modules.pop(name, None)


def _import(name):
    return importlib.import_module(name)


@contextmanager
def mpcompat_warnings():
    """Record every warning in the block; the list holds the MpcompatWarning messages."""
    found = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found.extend(str(w.message) for w in caught if issubclass(w.category, MpcompatWarning))


def _rows():
    return {row.name: row for row in mpcompat.status().patches}


def test_versions_are_read_leniently():
    assert patching.parse("2.13.0+cpu") == (2, 13, 0)
    assert patching.parse("1.9.0a0+git1234") == (1, 9, 0)
    assert patching.parse("1.4.0rc1") == (1, 4, 0)
    assert patching.parse("1.2.0.post1") == (1, 2, 0)
    assert patching.parse("not a version") is None
    assert patching.in_range("2.13.0+cpu", ">=1.8,<2.14")
    assert patching.in_range("1.9.0a0+git1234", ">=1.8,<2.14")
    assert patching.in_range("1.2", ">= 1.0 , < 1.3")
    assert not patching.in_range("2.14.0", ">=1.8,<2.14")
    assert not patching.in_range("1.7.1", ">=1.8,<2.14")
    assert not patching.in_range("garbage", ">=1.0")
    assert patching.in_range(PYTHON, "")
    with pytest.raises(ValueError, match="bad version clause"):
        patching.in_range("1.0", "~=1.0")
    for spec in patching.PATCHES:  # every declared range parses
        patching.in_range("1.0", spec.supported)


def test_the_table_is_immutable():
    spec = patching.PATCHES[0]
    assert isinstance(patching.PATCHES, tuple) and isinstance(spec.targets, tuple)
    with pytest.raises(AttributeError, match="immutable"):
        spec.supported = ""
    assert spec.supported == patching.TORCH_TESTED


def test_the_early_first_uses_are_the_tables():
    """activation.EARLY_FIRST_USES, the stubs activation puts on before the patch layer loads,
    are the first uses of every always-on patch of each of those targets, all of them the
    standard library's; a patch of them that applies as they are imported needs
    EARLY_OFF_ENV, which turns the early stubs off."""
    from mpcompat.activation import EARLY_FIRST_USES, EARLY_OFF_ENV
    expected = {}
    for target in EARLY_FIRST_USES:
        rows = [spec for spec in patching.PATCHES if target in spec.targets]
        on = [spec for spec in rows if not spec.needs_env]
        assert on and all(not spec.distributions and not spec.needed and spec.first_use.get(
            target) for spec in on), target
        assert {spec.needs_env for spec in rows if spec.needs_env} <= {EARLY_OFF_ENV}
        expected[target] = {path for spec in on for path in spec.first_use[target]}
    assert {t: set(paths) for t, paths in EARLY_FIRST_USES.items()} == expected
    # what mpcompat.patches.apply_standard applies to each, without the manager: the same rows
    from mpcompat.patcher import STANDARD
    assert STANDARD == {target: tuple((spec.name, spec.impl) for spec in patching.PATCHES
                                      if target in spec.targets and not spec.needs_env)
                        for target in EARLY_FIRST_USES}
    # every standard-library target whose always-on patches all wait for a first use is there
    for spec in patching.PATCHES:
        for target in spec.targets:
            on = [s for s in patching.PATCHES if target in s.targets and not s.needs_env]
            if on and all(not s.distributions and not s.needed and s.first_use.get(target)
                          for s in on):
                assert target in EARLY_FIRST_USES, target


def test_reading_the_table_imports_nothing():
    code = """
import sys
import mpcompat
before = set(sys.modules)
from mpcompat import patching
rows = [(s.name, s.impl, s.targets, s.supported) for s in patching.PATCHES]
print(sorted(set(sys.modules) - before))
before = set(sys.modules)
mpcompat.activate()
print(sorted(set(sys.modules) - before))
"""
    proc = run_python(code, env=child_env(MPCOMPAT_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr
    table_imports, activation_imports = [eval(line) for line in proc.stdout.splitlines()]
    assert set(table_imports) <= {"mpcompat.patching", "mpcompat.patcher", "itertools",
                                  "_operator"}  # built-ins, and the Patcher's module
    heavy = ("torch", "nuscenes", "mmcv", "numpy", "mpcompat.patches.", "importlib.metadata")
    assert [m for m in activation_imports if m.startswith(heavy)] == []


def test_patch_applies_when_its_target_is_imported(add_patch):
    add_patch("test.good", distributions=("pytest",), supported=">=3")
    mpcompat.activate()
    assert _rows()["test.good"].state == "waiting for import"
    target = _import(ALPHA)
    assert target.answer() == 42
    row = _rows()["test.good"]
    assert (row.state, row.distribution, row.version) == ("applied", "pytest", _pytest_version())
    assert ALPHA in row.reason


def test_target_imported_before_activation_is_patched_at_once(add_patch):
    mpcompat.deactivate()
    target = _import(ALPHA)
    add_patch("test.good")
    assert target.answer() == 41
    mpcompat.activate()
    assert target.answer() == 42
    assert _rows()["test.good"].state == "applied"


def test_activate_while_another_thread_imports_the_target_patches_it_once_finished(add_patch):
    import threading
    import time
    from patchkit import gate, good
    name = "patchkit.gated_target"
    sys.modules.pop(name, None)
    gate.started.clear()
    gate.release.clear()
    importer = threading.Thread(target=_import, args=(name,))
    importer.start()
    try:
        assert gate.started.wait(10)
        add_patch("test.gated", target=name)
        mpcompat.activate()  # the target is half-imported: never patched before it has run
        assert name not in good.CALLS
    finally:
        gate.release.set()
        importer.join(10)
    target = sys.modules[name]
    deadline = time.monotonic() + 10
    while target.answer() != 42 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert target.answer() == 42 and good.CALLS.count(name) == 1
    assert _rows()["test.gated"].state == "applied"
    mpcompat.deactivate()
    assert target.answer() == 41
    sys.modules.pop(name, None)


def test_patches_are_idempotent_and_reversible(add_patch):
    target = _import(ALPHA)
    original = target.answer
    add_patch("test.good")
    mpcompat.activate()
    mpcompat.activate()
    patched = target.answer
    assert patched() == 42  # applied once, not stacked
    mpcompat.deactivate()
    assert target.answer is original
    assert _rows()["test.good"].state == "inactive"
    mpcompat.activate()
    assert target.answer() == 42
    mpcompat.activate(disabled_patches=["test.good"])
    assert target.answer is original


def test_reload_of_a_target_reapplies(add_patch):
    from patchkit import good
    add_patch("test.good")
    mpcompat.activate()
    target = _import(ALPHA)
    calls = good.CALLS.count(ALPHA)
    importlib.reload(target)
    assert good.CALLS.count(ALPHA) == calls + 1
    assert target.answer() == 42
    assert _rows()["test.good"].state == "applied"
    mpcompat.deactivate()
    assert target.answer() == 41


def test_raising_patch_never_breaks_the_import_and_warns_once(add_patch):
    add_patch("test.raising", impl="patchkit.raising")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
        importlib.reload(target)
    assert target.answer() == 41
    assert len(found) == 1, found
    assert "'test.raising'" in found[0] and "Python %s" % PYTHON in found[0]
    assert "RuntimeError: boom: %s changed shape" % ALPHA in found[0]
    row = _rows()["test.raising"]
    assert row.state == "failed" and row.reason.startswith("RuntimeError: boom")


def test_patch_module_that_cannot_be_imported_fails_without_breaking_the_target(add_patch):
    add_patch("test.missing", impl="patchkit.no_such_patch")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
    assert target.answer() == 41
    assert len(found) == 1 and "'test.missing' failed on Python" in found[0]
    row = _rows()["test.missing"]
    assert row.state == "failed"
    assert row.reason == "ModuleNotFoundError: No module named 'patchkit.no_such_patch'"


def test_an_impl_may_name_an_object_in_a_module(add_patch):
    """A row's impl ``"module:object"`` (patches that always load together share a module):
    the object's apply and revert; an object the module lacks fails that patch, named."""
    add_patch("test.object", impl="patchkit.good:AS_OBJECT")
    add_patch("test.no_object", target=BETA, impl="patchkit.good:NO_SUCH")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target, beta = _import(ALPHA), _import(BETA)
    assert target.answer() == 42 and beta.answer() == 41
    rows = _rows()
    assert rows["test.object"].state == "applied"
    assert rows["test.no_object"].state == "failed"
    assert rows["test.no_object"].reason == (
        "ImportError: cannot import name 'NO_SUCH' from 'patchkit.good'")
    assert len(found) == 1 and "'test.no_object' failed on Python" in found[0], found
    mpcompat.deactivate()
    assert target.answer() == 41


def test_a_version_older_than_tested_stays_off_quietly(add_patch):
    add_patch("test.too_old", distributions=("pytest",), supported=">=1000")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
        importlib.reload(target)
    assert target.answer() == 41
    assert found == []  # merely untested: said in status(), never at import
    reason = ("untested on pytest %s; tested >=1000: it stays off below the tested versions"
              % _pytest_version())
    row = _rows()["test.too_old"]
    assert (row.state, row.reason, row.version) == ("skipped", reason, _pytest_version())


def test_a_version_newer_than_tested_applies_quietly_and_status_says_untested(add_patch):
    """A library release above the tested range never switches a fix off (issue 33)."""
    add_patch("test.newer", distributions=("pytest",), supported=">=1,<2")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
    assert target.answer() == 42
    assert found == []
    row = _rows()["test.newer"]
    assert (row.state, row.reason) == ("applied", "on %s (untested on pytest %s; tested >=1,<2)"
                                       % (ALPHA, _pytest_version()))
    mpcompat.activate(patches=["test.newer"])  # asked for explicitly: no PatchUnavailable


def test_a_newer_version_whose_hooks_are_gone_declines_with_its_reason(add_patch):
    add_patch("test.newer_declining", impl="patchkit.declining", distributions=("pytest",),
              supported=">=1,<2")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
    assert target.answer() == 41
    row = _rows()["test.newer_declining"]
    assert (row.state, row.reason) == ("skipped", "this build of %s needs no patch" % ALPHA)
    assert len(found) == 1 and "'test.newer_declining' skipped on pytest %s: this build" % (
        _pytest_version()) in found[0]


def test_patch_that_declines_is_skipped_with_its_reason(add_patch):
    add_patch("test.declining", impl="patchkit.declining")
    with mpcompat_warnings() as found:
        mpcompat.activate()
        target = _import(ALPHA)
    assert target.answer() == 41
    assert len(found) == 1 and "'test.declining'" in found[0]
    assert "skipped on Python %s: this build of %s needs no patch" % (PYTHON, ALPHA) in found[0]
    assert _rows()["test.declining"].state == "skipped"


_DECLINES_AT_FIRST_USE = """import mpcompat
import multiprocessing.pool, multiprocessing.reduction
del multiprocessing.reduction.dump  # what multiprocessing.pickling_notes hooks
def task(x): return x
if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(1) as pool:  # line 6
        pool.apply(task, (1,))
"""


def test_a_patch_declining_at_its_first_use_is_said_at_the_users_line():
    """The first use that applies a patch is the user's call into the library (``Pool()``):
    its warning names that line, not the library's own line that called the patched
    function (``multiprocessing/context.py``)."""
    proc = run_python(_DECLINES_AT_FIRST_USE, env=child_env(MPCOMPAT_WARNED=None))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(
        "<string>:6: MpcompatWarning: mpcompat: patch 'multiprocessing.pickling_notes' "
        "skipped on Python %s: multiprocessing.reduction has no dump()" % PYTHON), proc.stderr
    assert proc.stderr.count("MpcompatWarning") == 1, proc.stderr


# What mpcompat.pth runs at interpreter start, for a child given this checkout's mpcompat by
# PYTHONPATH: activation's first-use stubs go on as the standard library's targets are imported,
# as in an installed mpcompat (with "import mpcompat" first and no hook, the patch manager loads,
# and the stubs are its own).
_AT_START = ("import sys; sys.path.insert(0, %r); import _mpcompat_bootstrap; "
             "_mpcompat_bootstrap.main('mpcompat.pth')\n"
             % os.path.join(REPO, "mpcompat", "_startup"))
_WHOSE_STUBS = """manager = bool(os.environ.get("MPCOMPAT_HANG_DUMP"))
assert ("mpcompat.patching" in sys.modules) == manager  # whose stubs: the manager's or not
"""
_WRAPPED_STUB = _AT_START + """import faulthandler, functools, json, multiprocessing, os, sys
import mpcompat
from multiprocessing import process
""" + _WHOSE_STUBS + """from mpcompat.patches import mp_children
stub, calls = process.BaseProcess.__dict__["start"], []
assert stub.mpcompat_first_use  # put on as multiprocessing was imported, not fired yet
boot_stub = process.BaseProcess.__dict__["_bootstrap"]
read, write = os.pipe()

@functools.wraps(stub)
def start(self):  # a library's wrapper, made around the stub
    calls.append(self.name)
    return stub(self)

def _bootstrap(self, *args, **kwargs):  # coverage's kind: it starts measuring in each child
    os.write(write, b"%s " % self.name.encode())
    return boot_stub(self, *args, **kwargs)
process.BaseProcess.start, process.BaseProcess._bootstrap = start, _bootstrap

def child():  # armed by the patch of _bootstrap (its crash file), reached through the wrapper
    os._exit(3 if faulthandler.is_enabled() else 4)
children = [multiprocessing.get_context("fork").Process(target=child, name=str(n))
            for n in range(5)]
for each in children[:3]:
    each.start()
    each.join()
mpcompat.deactivate()  # the patch goes, beneath the library's wrappers too, which stay
assert process.BaseProcess.__dict__["start"] is start
assert process.BaseProcess.__dict__["_bootstrap"] is _bootstrap
children[3].start()
children[3].join()
mpcompat.activate()  # the patch at once (a first use has come), over the wrappers
assert process.BaseProcess.__dict__["start"].__wrapped__ is start
children[4].start()
children[4].join()
os.close(write)
booted = os.read(read, 1000).decode().split()
print(json.dumps([calls, booted, [c.exitcode for c in children],
                  [mp_children.CRASH_KEY in c._config for c in children]]))
"""


@pytest.mark.parametrize("hang_dump", [None, "600"], ids=["activations-stubs", "managers-stubs"])
def test_a_wrapper_made_around_a_first_use_stub_runs_once_per_call(hang_dump):
    """A library wraps ``Process.start`` and ``_bootstrap`` after the stubs went on (each as
    coverage's ``concurrency=multiprocessing`` does with ``_bootstrap``): the first call
    applies the patches beneath the wrappers, as if they had applied at import, and each
    wrapper runs once per call, the first included; in the fork children too, which inherit a
    ``_bootstrap`` stub never called in the parent. Each child is started and armed through
    the patches. Deactivated, the patches go, and the wrappers stay; activated again, the patch
    goes on over them (no endless recursion through the stub they call). The stubs are activation's,
    or the patch manager's where ``MPCOMPAT_HANG_DUMP`` has it load first."""
    proc = run_python(_WRAPPED_STUB, env=child_env(MPCOMPAT_HANG_DUMP=hang_dump))
    assert proc.returncode == 0, proc.stderr
    calls, booted, codes, patched = json.loads(proc.stdout)
    assert calls == booted == ["0", "1", "2", "3", "4"], proc.stdout
    assert codes == [3, 3, 3, 4, 3] and patched == [True, True, True, False, True], proc.stdout


_INTERRUPTED_FIRST_USE = _AT_START + """import json, multiprocessing, multiprocessing.pool, os
import signal, sys
from mpcompat import activation
""" + _WHOSE_STUBS + """where, sent = sys.argv[1], []
signal.signal(signal.SIGINT, signal.default_int_handler)  # (ignored where a shell's "&" started us)

def profile(frame, event, arg):  # a real SIGINT, as the first use runs `where` of mpcompat's
    if event == "call" and frame.f_code.co_name == where and not sent:
        sent.append(True)  # (first: the KeyboardInterrupt may come as soon as the kill returns)
        os.kill(os.getpid(), signal.SIGINT)

def stubs():
    return [path for name, paths in activation.EARLY_FIRST_USES.items() if name in sys.modules
            for owner, attr, path in activation.first_use_spots(sys.modules[name], paths)
            if activation.stands_for(owner.__dict__[attr]) is not None]

def crash():
    os.kill(os.getpid(), signal.SIGSEGV)

context = multiprocessing.get_context("fork")
sys.setprofile(profile)
try:
    context.Process(target=int).start()
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
sys.setprofile(None)
child = context.Process(target=crash)  # the program caught it, and goes on
child.start()
child.join()
with context.Pool(1) as pool:
    pool.map(abs, [1])
import mpcompat
rows = sorted((r.name, r.state) for r in mpcompat.status().patches)
print(json.dumps([bool(sent), interrupted, stubs(), "mpcompat_crash_file" in child._config,
                  child.exitcode, rows]))
"""


@pytest.mark.parametrize("hang_dump", [None, "600"], ids=["activations-stubs", "managers-stubs"])
def test_a_ctrl_c_during_a_first_use_loses_no_patch(hang_dump):
    """A Ctrl-C that lands while a first use applies the patches (a real SIGINT, as the first
    patch's code is looked up, or as the patch of ``Process.start`` applies) reaches the
    program as it would without mpcompat; what was not applied yet applies at the next first
    use: the next child is armed (its crash file), no stub is left once a Pool ran, and
    ``status()`` reads as in a run never interrupted. Before, the stubs not reached stayed
    for the process's life, calling the bare originals, while ``status()`` said "applied"."""
    env = child_env(MPCOMPAT_HANG_DUMP=hang_dump)
    results = {}
    for where in ("never", "implementation", "_apply_records"):
        proc = run_python(_INTERRUPTED_FIRST_USE, where, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        results[where] = json.loads(proc.stdout)
    never = results.pop("never")
    assert never[:5] == [False, False, [], True, -11], never
    for where, (sent, interrupted, stubs, armed, code, rows) in results.items():
        assert sent and interrupted, where
        assert (stubs, armed, code) == ([], True, -11), (where, stubs, armed)
        assert rows == never[5], where


def test_disabled_patches_from_the_environment(add_patch, monkeypatch):
    add_patch("test.one")
    add_patch("test.two", target=BETA)
    monkeypatch.setenv("MPCOMPAT_DISABLED_PATCHES", " test.one, test.two")
    mpcompat.activate()
    assert _import(ALPHA).answer() == 41 and _import(BETA).answer() == 41
    rows = _rows()
    for name in ("test.one", "test.two"):
        assert (rows[name].state, rows[name].reason) == (
            "disabled", "disabled by MPCOMPAT_DISABLED_PATCHES")
    monkeypatch.setenv("MPCOMPAT_DISABLED_PATCHES", "test.two")
    mpcompat.activate()
    assert _import(ALPHA).answer() == 42 and _import(BETA).answer() == 41
    monkeypatch.setenv("MPCOMPAT_DISABLED_PATCHES", "*")
    mpcompat.activate()
    assert _import(ALPHA).answer() == 41
    assert {row.state for row in _rows().values()} == {"disabled"}


def test_activate_takes_the_same_choice_and_checks_it(add_patch):
    add_patch("test.one")
    add_patch("test.old", target=BETA, distributions=("pytest",), supported=">=1000")
    add_patch("test.absent", target=BETA, distributions=("no-such-distribution-mpcompat",))
    with pytest.raises(ValueError, match="patches: unknown patch name.*'no.such'"):
        mpcompat.activate(patches=["test.one", "no.such"])
    with pytest.raises(ValueError, match="disabled_patches: unknown patch name"):
        mpcompat.activate(disabled_patches="test.one,no.such")
    with pytest.raises(PatchUnavailable, match=r"'test.old' cannot apply: untested on pytest "
                                               r"\S+; tested >=1000: it stays off below"):
        mpcompat.activate(patches=["test.old"])
    with pytest.raises(PatchUnavailable, match="'test.absent' cannot apply: "
                                               "no-such-distribution-mpcompat is not installed"):
        mpcompat.activate(patches=["test.absent"])
    mpcompat.activate(patches=["test.one"])
    rows = _rows()
    assert rows["test.one"].state == "waiting for import"
    assert (rows["test.old"].state, rows["test.old"].reason) == ("disabled", "not requested")
    assert _import(ALPHA).answer() == 42
    mpcompat.activate(patches=["test.one"], disabled_patches=["test.one"])
    assert _import(ALPHA).answer() == 41
    assert _rows()["test.one"].reason == "disabled by activate(disabled_patches=...)"
    mpcompat.activate(disabled_patches="*")
    assert {row.state for row in _rows().values()} == {"disabled"}


def test_asking_for_a_patch_that_failed_raises_its_reason(add_patch):
    add_patch("test.raising", impl="patchkit.raising")
    with mpcompat_warnings():
        mpcompat.activate()
        _import(ALPHA)
    with pytest.raises(PatchUnavailable, match="'test.raising' cannot apply: RuntimeError: boom"):
        mpcompat.activate(patches=["test.raising"])


def test_status_lists_every_state_with_reason_and_version(add_patch):
    add_patch("test.applied")
    add_patch("test.waiting", target=BETA, distributions=("pytest",), supported=">=1")
    add_patch("test.skipped", impl="patchkit.declining")
    add_patch("test.failed", impl="patchkit.raising")
    add_patch("test.disabled", target=BETA)
    with mpcompat_warnings():
        mpcompat.activate(disabled_patches=["test.disabled"])
        _import(ALPHA)
    report = mpcompat.status()
    rows = {row.name: row for row in report.patches}
    assert [rows["test." + s].state for s in ("applied", "waiting", "skipped", "failed",
                                              "disabled")] == [
        "applied", "waiting for import", "skipped", "failed", "disabled"]
    assert rows["test.waiting"].version == _pytest_version()
    assert rows["test.applied"].version == PYTHON
    text = str(report)
    for spec in patching.PATCHES:
        assert spec.name in text
    for needle in ("needs no patch", "RuntimeError: boom", "disabled by activate",
                   "pytest %s" % _pytest_version(), "Python %s" % PYTHON,
                   "none of %s imported yet" % BETA):
        assert needle in text, needle


def test_command_line_status():
    env = child_env(MPCOMPAT_DISABLED_PATCHES="nuscenes.tracking_config,torch.generator")
    proc = subprocess.run([sys.executable, "-m", "mpcompat", "status"], env=env, cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("mpcompat %s: active" % mpcompat.__version__)
    for spec in patching.PATCHES:
        row = [line for line in lines if line.split()[:1] == [spec.name]]
        assert len(row) == 1, (spec.name, proc.stdout)
        if spec.name in ("nuscenes.tracking_config", "torch.generator"):
            assert " disabled " in row[0]
            following = lines[lines.index(row[0]) + 1]
            assert following.strip() == "disabled by MPCOMPAT_DISABLED_PATCHES"
        else:
            assert row[0].split()[1] in ("waiting", "applied", "skipped", "failed", "not")
