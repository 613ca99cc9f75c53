"""Fixtures shared by the whole suite.

Spawn children are expensive (about 1 s each without torch, 3 s once torch is imported), so
the suite shares one spawn pool and one forkserver pool for the session; tests send them
functions from ``tests/workers.py`` (importable in the children: the spawn start passes
sys.path on, and ``tests/`` is on it because this conftest lives there).
"""
import copyreg
import multiprocessing
import os
import sys

import pytest

# Helpers for tests live in testenv.py (``from testenv import run_python``): a conftest.py is
# not importable by name once several of them exist (each is imported as "conftest").
from testenv import REPO, TESTS, child_env, run_python  # noqa: E402,F401


def _session_pool(method):
    pool = multiprocessing.get_context(method).Pool(2)
    yield pool
    pool.terminate()
    pool.join()


@pytest.fixture(scope="session")
def spawn_pool():
    """A two-process ``spawn`` pool shared by the whole session."""
    yield from _session_pool("spawn")


@pytest.fixture(scope="session")
def forkserver_pool():
    """A two-process ``forkserver`` pool shared by the whole session."""
    yield from _session_pool("forkserver")


@pytest.fixture
def restore_mpcompat():
    """Let a test activate, deactivate, register and touch copyreg freely.

    Afterwards: mpcompat is deactivated, every reducer the test left in the registry is
    unregistered, ``copyreg.dispatch_table`` is put back as it was before the test, and
    mpcompat is re-activated if it was active. Yields the snapshot of the table (a dict).
    """
    import mpcompat
    from mpcompat import activation
    was_active = mpcompat.is_active()
    before = dict(copyreg.dispatch_table)
    yield dict(before)
    mpcompat.deactivate()
    for cls in list(mpcompat.registered()):
        mpcompat.unregister(cls)
    builtin = activation.builtin_reducers()
    baseline = {cls: red for cls, red in before.items() if builtin.get(cls) is not red}
    copyreg.dispatch_table.clear()
    copyreg.dispatch_table.update(baseline)
    if was_active:
        mpcompat.activate()
    assert dict(copyreg.dispatch_table) == before, "restore_mpcompat could not restore copyreg"


@pytest.fixture(scope="module")
def stdlib_python_pickler():
    """Make ``pickle._Pickler`` the standard library's pure-Python pickler for a test module
    (``pytestmark = pytest.mark.usefixtures("stdlib_python_pickler")``).

    Importing dill adds dill's save functions to ``pickle._Pickler.dispatch`` (``dill.extend``),
    where they take precedence over ``copyreg.dispatch_table``; dill's own ``extend(False)``
    takes them out for the module and ``extend(True)`` puts them back afterwards.
    """
    import pickle
    dill = sys.modules.get("dill")
    extended = dill is not None and any(
        getattr(func, "__module__", None) == "dill._dill"
        for func in pickle._Pickler.dispatch.values())
    if extended:
        dill.extend(False)
    foreign = {cls: func for cls, func in pickle._Pickler.dispatch.items()
               if getattr(func, "__module__", None) != "pickle"}
    assert not foreign, "pickle._Pickler.dispatch was changed by another package: %r" % foreign
    yield
    if extended:
        dill.extend(True)
