"""The wheel's mpcompat.pth activates mpcompat in every interpreter of the venv and in every
child it starts, without ``import mpcompat`` in user code; MPCOMPAT_DISABLE=1 keeps it off,
and then everything fails as it does without mpcompat."""
import os

import pytest

VIEWS = [["dict_keys", ["car", "pedestrian"]], ["dict_values", [50, 40]],
         ["odict_items", [["car", 50], ["pedestrian", 40]]]]
CANNOT_PICKLE = "TypeError: cannot pickle 'dict_keys' object"
ON_OFF = pytest.mark.parametrize("disabled", [False, True], ids=["on", "MPCOMPAT_DISABLE"])


def switch(disabled):
    """Keyword arguments for Venv.run: MPCOMPAT_DISABLE=1, or nothing."""
    return {"MPCOMPAT_DISABLE": "1"} if disabled else {}


def test_the_wheel_puts_the_hook_at_the_root_of_site_packages(installed):
    import mpcompat
    for name in ("mpcompat.pth", "mpcompat.start"):  # .start: PEP 829, Python 3.15+
        with open(os.path.join(installed.site_packages, name)) as f:
            installed_text = f.read()
        with open(os.path.join(os.path.dirname(mpcompat.__file__), "_startup", name)) as f:
            assert f.read() == installed_text
    assert os.path.isfile(os.path.join(installed.site_packages, "_mpcompat_bootstrap.py"))


@ON_OFF
@pytest.mark.parametrize("flags", [[], ["-I"]], ids=["plain", "isolated"])
def test_a_plain_script(installed, flags, disabled):
    report = installed.report("plain.py", prefix=["python"] + flags, **switch(disabled))
    if disabled:
        assert report["error"] == CANNOT_PICKLE
        assert report["mpcompat_file"] is None
    else:
        assert report["result"] == VIEWS
        assert report["view_reducer"] == "mpcompat.activation"
        assert report["mpcompat_file"].startswith(installed.site_packages)
        # Once: a venv processes its .pth files twice per start (CPython #75723); the second
        # time, the line sees the hook loaded and skips it.
        assert report["bootstrap_calls"] == ["mpcompat.pth"]


@ON_OFF
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_child_process(installed, method, disabled):
    report = installed.report("pool.py", method, **switch(disabled))
    if disabled:
        assert report["error"] == CANNOT_PICKLE
    else:
        assert report["result"] == [[kind, values] for kind, values in VIEWS[:2]] + [
            ["dict_items", [["car", 50], ["pedestrian", 40]]]]
        assert report["child_active"] is True


@ON_OFF
def test_dataloader_workers(installed, disabled):
    # Disabled, torch warns about the pickling error it then raises.
    report = installed.report("loader.py", "spawn", quiet=not disabled, **switch(disabled))
    if disabled:
        assert report["error"] == CANNOT_PICKLE
    else:
        assert report["result"] == [["dict_keys", ["car", "pedestrian"]]] * 2
        assert report["worker_active"] == [True, True]


def test_processing_the_pth_again_does_nothing(installed):
    code = ("import pickle, site, sys, _mpcompat_bootstrap as boot; "  # pickle: activates
            "first = sys.modules['mpcompat']; "
            "n = len(boot.calls); site.addsitedir(%r); "
            "print(len(boot.calls) - n, boot.outcome, sys.modules['mpcompat'] is first)"
            % installed.site_packages)
    proc = installed.run(["python", "-c", code])
    # a virtualenv's site processes it twice already: the line skips a loaded hook
    assert (proc.stdout, proc.stderr) == ("0 activated True\n", "")


@ON_OFF
def test_status_names_the_route(installed, disabled):
    proc = installed.run(["python", "-m", "mpcompat", "status"], **switch(disabled))
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()[:2]
    pth = os.path.join(installed.site_packages, "mpcompat.pth")
    if disabled:
        assert first.endswith(": inactive in this process, off: MPCOMPAT_DISABLE=1 is set")
        assert second == ("auto-activation at interpreter start: on for this environment (%s), "
                          "but MPCOMPAT_DISABLE=1 keeps mpcompat off in this process tree" % pth)
    else:
        assert first.endswith(": active in this process, activated at start-up by mpcompat.pth")
        assert second == "auto-activation at interpreter start: on for this environment (%s)" % pth
