"""A warning mpcompat gives at interpreter start (here: a typo in MPCOMPAT_DISABLED_PATCHES)
under ``-W error`` or ``PYTHONWARNINGS=error``, with the wheel's ``mpcompat.pth`` activating
it: mpcompat stays on in the process and its children, the warning is one stderr line, once
per process tree, and nothing calls the install broken."""
import pytest

TYPO = "torch.boolean-dispach"
# The child is a plain Python started by the program: it inherits the environment (so
# PYTHONWARNINGS, and the mark that the warning was given); -W is passed on by hand.
CODE = ("import subprocess, sys, _mpcompat_bootstrap as boot\n"
        "import mpcompat\n"
        "print(mpcompat.is_active(), boot.outcome, mpcompat.status().how)\n"
        "sys.stdout.flush()\n"
        "subprocess.run([sys.executable] + ['-W' + f for f in sys.warnoptions] + ['-c', "
        "'import mpcompat, sys; print(\"child\", mpcompat.is_active(), "
        "\"mpcompat.pth\" in mpcompat.status().how)'], check=True)\n")


@pytest.fixture(scope="module", params=["3.11", "3.8"])
def venv(request, make_venv, wheel_for):
    """A venv of the given Python with the wheel installed (the session's 3.11 one for 3.11)."""
    if request.param == "3.11":
        return request.getfixturevalue("installed")
    return make_venv(request.param, wheel=wheel_for(request.param))


@pytest.mark.parametrize("how", ["-W error", "PYTHONWARNINGS=error"])
def test_a_typo_warning_at_start_up_under_w_error_keeps_mpcompat_on(venv, how):
    argv = ["python", "-W", "error"] if how == "-W error" else ["python"]
    env = {"PYTHONWARNINGS": "error"} if how == "PYTHONWARNINGS=error" else {}
    proc = venv.run(argv + ["-c", CODE], MPCOMPAT_DISABLED_PATCHES=TYPO, **env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "True activated activated at start-up by mpcompat.pth", "child True True"], proc.stderr
    assert proc.stderr.splitlines() == [
        "MpcompatWarning: mpcompat: MPCOMPAT_DISABLED_PATCHES: unknown patch name %r "
        "ignored (did you mean torch.boolean_dispatch?); `mpcompat status` lists the patches"
        % TYPO], proc.stderr
    assert "broken" not in proc.stderr and "reinstall" not in proc.stderr
