"""Installing, turning off and on, uninstalling, and a broken install: the interpreter always
starts, and pip leaves nothing behind."""
import base64
import hashlib
import os
import sysconfig
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


def auto_activation(venv):
    """The status line about auto-activation."""
    proc = venv.run(["python", "-m", "mpcompat", "status"])
    assert proc.returncode == 0, proc.stderr
    return [l for l in proc.stdout.splitlines() if l.startswith("auto-activation:")][0]


def test_disable_enable_uninstall_round_trips(make_venv, wheel):
    venv = make_venv()
    before = venv.files()
    venv.install(wheel)
    assert venv.run(["python", "-c", ACTIVE]).stdout == "True True\n"

    proc = venv.run(["mpcompat", "disable"])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert venv.run(["python", "-c", IMPORTED]).stdout == "False\n"
    assert venv.run(["python", "-c", IMPORTED], MPCOMPAT_DISABLE="0").stdout == "False\n"
    assert "off for this environment by 'mpcompat disable'" in auto_activation(venv)
    assert "activated by an explicit import" in auto_activation(venv)

    proc = venv.run(["python", "-m", "mpcompat", "enable"])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert venv.run(["python", "-c", ACTIVE]).stdout == "True True\n"
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


def test_a_broken_install_costs_one_line_of_stderr(make_venv, wheel):
    venv = make_venv(wheel=wheel)
    # A corrupted file, as a failed disk or an interrupted copy leaves it; its .pyc no longer
    # matches the source, so Python compiles the source again and fails.
    with open(os.path.join(venv.site_packages, "mpcompat", "activation.py"), "w") as f:
        f.write("def activate(:\n")
    child = "import sys; print(2, 'mpcompat' in sys.modules)"
    code = ("import os, subprocess, sys; print(1); sys.stdout.flush(); "
            "subprocess.run([sys.executable, '-c', %r]); "
            "print(os.environ['MPCOMPAT_AUTOSTART_FAILED'])" % child)
    proc = venv.run(["python", "-c", code])
    assert proc.returncode == 0
    assert proc.stdout == "1\n2 False\nSyntaxError: invalid syntax (activation.py, line 1)\n"
    # One line, from the parent; the child saw the marker and did not try again.
    assert proc.stderr == (
        "mpcompat: auto-activation failed, mpcompat stays off in this process and its children "
        "(SyntaxError: invalid syntax (activation.py, line 1))\n")


def test_the_wheel_carries_the_c_extension_and_only_its_own(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    ext = [n for n in names if n.startswith("mpcompat/_speedups")]
    assert ext == ["mpcompat/_speedups" + sysconfig.get_config_var("EXT_SUFFIX")]
    assert "-cp311-cp311-" in os.path.basename(wheel)


def test_without_a_c_compiler_the_wheel_is_pure_python_and_works(make_venv, wheel_without_cc):
    built, output = wheel_without_cc
    assert os.path.basename(built).endswith("-py3-none-any.whl")
    assert "mpcompat: C extension not built (" in output
    with zipfile.ZipFile(built) as zf:
        assert not [n for n in zf.namelist() if "_speedups" in n]
    venv = make_venv(wheel=built)
    report = venv.report("plain.py")
    assert report["result"][0] == ["dict_keys", ["car", "pedestrian"]]
    assert report["view_reducers"].startswith("pure Python (C extension not available: ")
