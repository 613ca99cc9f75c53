"""The README's install route, on an environment without torch, mmcv or nuscenes-devkit: the
demo still shows mpcompat at work (the standard-library scenarios), skips the others, and
exits 0."""


def test_the_demo_works_where_only_the_standard_library_is(make_venv, wheel_for):
    venv = make_venv("3.13", wheel=wheel_for("3.13"))
    proc = venv.run(["mpcompat", "demo"], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "[1] Pool(spawn).map over records whose config keeps class_names" in out
    assert "without mpcompat: FAILED TypeError: cannot pickle 'dict_keys' object" in out
    assert "skipped (needs mmcv, torch)" in out and "skipped (needs torch)" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("3 of 3 scenarios work with mpcompat; ") and "skipped" in last
    assert proc.stderr == ""
