"""Installing, turning off and on, uninstalling: the interpreter always starts, status tells
one story, and pip leaves nothing behind. (Broken installs: test_startup_faults.py.)"""
import base64
import hashlib
import os
import zipfile

ACTIVE = ("import sys, pickle; pickle.dumps({}.keys()); "
          "print('mpcompat' in sys.modules, sys.modules['mpcompat'].is_active())")
IMPORTED = "import sys; print('mpcompat' in sys.modules)"


def recorded_hash(venv, name):
    """The sha256 that the installed RECORD lists for ``name``, and the file's current one."""
    dist_info = [d for d in os.listdir(venv.site_packages) if d.startswith("mpcompat-")][0]
    with open(os.path.join(venv.site_packages, dist_info, "RECORD")) as f:
        listed = [line.split(",")[1] for line in f if line.split(",")[0] == name][0]
    with open(os.path.join(venv.site_packages, name), "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    return listed, "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def status_lines(venv, code=None):
    """The first two lines of the status report: from the mpcompat command, or from ``code``
    run with the venv's python (which prints str(mpcompat.status()))."""
    argv = (["python", "-m", "mpcompat", "status"] if code is None
            else ["python", "-c", code])
    proc = venv.run(argv)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[:2]


PRINT_STATUS = "import mpcompat; print(mpcompat.status())"


def test_disable_enable_uninstall_round_trips(make_venv, wheel):
    venv = make_venv()
    before = venv.files()
    venv.install(wheel)
    assert venv.run(["python", "-c", ACTIVE]).stdout == "True True\n"

    proc = venv.run(["mpcompat", "disable"])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert venv.run(["python", "-c", IMPORTED]).stdout == "False\n"
    assert venv.run(["python", "-c", IMPORTED], MPCOMPAT_DISABLE="0").stdout == "False\n"
    # One story, told the same way by the command and by a program importing mpcompat.
    pth = os.path.join(venv.site_packages, "mpcompat.pth")
    off = ("auto-activation at interpreter start: off for this environment by 'mpcompat "
           "disable' (%s): new Python processes start without mpcompat; 'mpcompat enable' "
           "turns it back on" % pth)
    first, second = status_lines(venv)
    assert first.endswith(": active in this process only, activated by the mpcompat command "
                          "itself")
    assert second == off
    first, second = status_lines(venv, PRINT_STATUS)
    assert first.endswith(": active in this process only, activated by import mpcompat")
    assert second == off

    proc = venv.run(["python", "-m", "mpcompat", "enable"])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert venv.run(["python", "-c", ACTIVE]).stdout == "True True\n"
    for lines in (status_lines(venv), status_lines(venv, PRINT_STATUS)):
        assert lines[0].endswith(": active in this process, activated at start-up by "
                                 "mpcompat.pth")
        assert lines[1] == "auto-activation at interpreter start: on for this environment (%s)" % pth
    for name in ("mpcompat.pth", "mpcompat.start"):  # byte for byte what pip installed
        listed, actual = recorded_hash(venv, name)
        assert listed == actual

    # Turned off, then uninstalled: nothing is left, not even the off switch.
    assert venv.run(["mpcompat", "disable"]).returncode == 0
    venv.pip("uninstall", "-y", "mpcompat")
    assert venv.files() == before
    venv.install(wheel)
    assert venv.run(["python", "-c", ACTIVE]).stdout == "True True\n"
    venv.pip("uninstall", "-y", "mpcompat")
    assert venv.files() == before


def test_disable_without_an_installed_hook_says_so(bare, repo):
    proc = bare.run(["python", "-m", "mpcompat", "disable"], cwd=repo)
    assert proc.returncode == 1
    assert proc.stderr.startswith("mpcompat disable: no mpcompat.pth in this environment")


def test_the_wheel_is_pure_python(wheel):
    assert os.path.basename(wheel).endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]
    assert "mpcompat/rebuild_views.py" in names and "mpcompat.pth" in names
