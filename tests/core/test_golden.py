"""Pickles written by earlier mpcompat versions still load (tests/golden/, see make_golden.py).

A pickle names its rebuild function by import path, so moving, renaming or changing the
signature of anything in ``mpcompat.rebuild`` would break every pickle already written.
"""
import importlib.util
import io
import os
import pickle
import sys

import pytest

import mpcompat
from testenv import TESTS, child_env, run_python
from workers import canon

# pickle._Pickler as the standard library has it, even if dill was imported
pytestmark = pytest.mark.usefixtures("stdlib_python_pickler")

GOLDEN = os.path.join(TESTS, "golden")


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "mpcompat_make_golden", os.path.join(GOLDEN, "make_golden.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
FILES = sorted(gen.expected_files())


def test_every_golden_file_is_committed():
    on_disk = {name for name in os.listdir(GOLDEN) if name.endswith(".pickle")}
    assert on_disk == set(FILES)
    assert len(FILES) == (len(gen.VIEW_KINDS) + 1) * 6


def _read(name):
    with open(os.path.join(GOLDEN, name), "rb") as f:
        return f.read()


def _check(name, obj):
    kind, _ = gen.expected_files()[name]
    if kind == "module":
        assert obj is sys.modules[gen.MODULE_NAME]
        return
    expected = gen.golden_view(kind)
    assert type(obj) is type(expected)
    assert type(obj).__name__ == kind
    assert canon(obj) == canon(expected)


@pytest.mark.parametrize("name", FILES)
def test_golden_file_loads_to_the_right_type_and_contents(name):
    data = _read(name)
    kind, protocol = gen.expected_files()[name]
    assert (data[:1] == pickle.PROTO) == (protocol >= 2)
    if protocol >= 2:
        assert data[1] == protocol
    assert b"mpcompat.rebuild" in data  # rebuild_views (views), rebuild (module)
    _check(name, pickle.loads(data))
    _check(name, pickle._Unpickler(io.BytesIO(data)).load())


def test_golden_files_load_while_mpcompat_is_deactivated(restore_mpcompat):
    """Unpickling needs the rebuild functions only, not activation."""
    mpcompat.deactivate()
    for name in FILES:
        _check(name, pickle.loads(_read(name)))


def test_golden_files_load_in_a_process_that_never_imported_mpcompat():
    code = """if 1:
    import os, pickle, sys
    assert 'mpcompat' not in sys.modules
    out = []
    for name in sorted(os.listdir(sys.argv[1])):
        if name.endswith('.pickle'):
            with open(os.path.join(sys.argv[1], name), 'rb') as f:
                obj = pickle.loads(f.read())
            out.append('%s %s %r' % (name, type(obj).__name__,
                                     list(obj) if hasattr(obj, '__iter__') else obj.__name__))
    print('\\n'.join(out))
    print('active', sys.modules['mpcompat'].is_active())
    """
    proc = run_python(code, GOLDEN, env=child_env(MPCOMPAT_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "active False"
    assert len(lines) - 1 == len(FILES)
    for line, name in zip(lines, FILES):
        kind, _ = gen.expected_files()[name]
        shown = repr(list(gen.golden_view(kind))) if kind != "module" else repr(gen.MODULE_NAME)
        assert line == "%s %s %s" % (name, kind, shown)
