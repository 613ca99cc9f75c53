"""A Python newer than the tested range (faked: ``patching.python_version``): a standard-library
patch that finds the internals it hooks applies, quietly, and says in status() that it is
untested there; one that does not find them stays off, with one warning."""
from testenv import run_python

NEWER = """
from mpcompat import patching
patching.python_version = lambda: "3.16.0"
import multiprocessing.pool, multiprocessing.spawn
import mpcompat
rows = {p.name: p for p in mpcompat.status().patches}
for name in ("multiprocessing.bootstrap_notes", "multiprocessing.pool_workers"):
    print("ROW", name, rows[name].state, "|", rows[name].reason, flush=True)
with multiprocessing.get_context("fork").Pool(2) as pool:
    print("MAP", pool.map(abs, [-1, -2]), flush=True)
mpcompat.deactivate()
del multiprocessing.spawn._check_not_importing_main  # internals this patch does not find
mpcompat.activate()
mpcompat.deactivate()
mpcompat.activate()
rows = {p.name: p for p in mpcompat.status().patches}
print("OFF", rows["multiprocessing.bootstrap_notes"].state, "|",
      rows["multiprocessing.bootstrap_notes"].reason, flush=True)
print("ON", rows["multiprocessing.pool_workers"].state, flush=True)
"""


def test_a_newer_python_applies_what_it_can_and_warns_once_for_the_rest():
    result = run_python(NEWER, timeout=120)
    out, err = result.stdout, result.stderr
    untested = "(untested on Python 3.16.0; tested >=3.8,<3.16; its code loads at the first call of "
    assert "ROW multiprocessing.bootstrap_notes applied | on multiprocessing.spawn " + \
        untested + "_main or get_preparation_data)" in out, out + err
    assert "ROW multiprocessing.pool_workers applied | on multiprocessing.pool " + untested + \
        "Pool.__init__ or worker)" in out
    assert "MAP [1, 2]" in out
    assert "OFF skipped | multiprocessing.spawn has no _check_not_importing_main() or _main()" \
        in out
    assert "ON applied" in out
    # Nothing was said until a patch had to stay off; then once.
    assert err.count("MpcompatWarning") == 1, err
    assert ("MpcompatWarning: mpcompat: patch 'multiprocessing.bootstrap_notes' skipped on "
            "Python 3.16.0: multiprocessing.spawn has no _check_not_importing_main() or "
            "_main()") in err
