"""Fixtures for the start-up tests: the real wheel, installed by pip into fresh virtualenvs.

The wheel is built once per session from this checkout. Fresh venvs are made without pip (the
pip of the matching project venv installs into them with ``--python``) and get a
``_main_venv.pth`` whose one line appends the project venv's site-packages to sys.path, so that
torch (200+ MB) is not installed again. A path line only extends sys.path: the ``.pth`` files of
the appended directory are not processed, and mpcompat is not installed there. Children run
with no PYTHONPATH and from a directory outside the checkout, so in them mpcompat can only come
from the wheel (``bare`` checks that it is not importable otherwise).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
PROJECT_VENVS = {"3.11": os.path.join(REPO, ".venv"), "3.8": os.path.join(REPO, ".venv38"),
                 "3.13": os.path.join(REPO, ".venv313")}
# The tests' own sitecustomize, to show that ``mpcompat run`` chains to the one it shadows.
USER_SITECUSTOMIZE = "import sys\nsys.startup_test_marker = __file__\n"


def clean_env(**overrides):
    """os.environ without PYTHONPATH and MPCOMPAT_* variables, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MPCOMPAT_") and k not in ("PYTHONPATH", "PYTHONHOME",
                                                          "VIRTUAL_ENV")}
    env.update(overrides)
    return env


TRACKER_RACE = re.compile(
    r"\S*multiprocessing/resource_tracker\.py:\d+: UserWarning: resource_tracker: There appear "
    r"to be \d+ leaked semaphore objects to clean up at shutdown\n\s+warnings\.warn\(.*\n"
    r"(\S*multiprocessing/resource_tracker\.py:\d+: UserWarning: resource_tracker: '/mp-\w+': "
    r"\[Errno 2\] No such file or directory\n\s+warnings\.warn\(.*\n)+")


def without_tracker_race(stderr):
    """``stderr`` without the resource tracker's report of semaphores it was not told were
    freed, when each of them turns out to be gone already ([Errno 2]): nothing leaked. The
    tracker process prints it now and then after a spawn DataLoader shuts down, with or without
    mpcompat (pytorch#23117)."""
    return TRACKER_RACE.sub("", stderr)


class Venv(object):
    """A fresh virtualenv and ways to run things in it."""

    def __init__(self, root, version, workdir):
        self.root, self.version, self.workdir = root, version, workdir
        self.python = os.path.join(root, "bin", "python")
        self.bin = os.path.join(root, "bin")
        self.site_packages = glob.glob(os.path.join(root, "lib", "python*", "site-packages"))[0]

    def run(self, argv, env=None, timeout=150, cwd=None, **overrides):
        """Run ``argv`` (a bare first item names a program in the venv's bin); capture text."""
        argv = list(argv)
        if os.sep not in argv[0]:
            argv[0] = os.path.join(self.bin, argv[0])
        return subprocess.run(argv, env=env if env is not None else clean_env(**overrides),
                              cwd=cwd or self.workdir, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)

    def script(self, name, *args, **kwargs):
        """Run ``tests/startup/scripts/<name>`` with the venv's python.

        ``prefix``: argv items before it (default ``["python"]``), e.g. a launcher and flags.
        """
        prefix = kwargs.pop("prefix", ["python"])
        return self.run(list(prefix) + [os.path.join(SCRIPTS, name)] + list(args), **kwargs)

    def report(self, name, *args, **kwargs):
        """Run a script that prints one JSON line; return it parsed.

        Fails unless the exit code is 0 and, with ``quiet`` (the default), stderr is empty.
        """
        quiet = kwargs.pop("quiet", True)
        proc = self.script(name, *args, **kwargs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not (quiet and without_tracker_race(proc.stderr)), proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def launcher_from_source(self, *options):
        """argv prefix ``mpcompat run OPTIONS -- <this python>``, the launcher run from the
        checkout: mpcompat is importable in the launcher process only (the test gives its
        children no PYTHONPATH), so what activates it in them comes from ``mpcompat run``."""
        code = ("import sys; sys.path.insert(0, %r); from mpcompat.cli.main import main; "
                "sys.exit(main())" % REPO)
        return ["python", "-c", code, "run"] + list(options) + ["--", self.python]

    def pip(self, *args):
        """Run the matching project venv's pip on this venv."""
        project_python = os.path.join(PROJECT_VENVS[self.version], "bin", "python")
        proc = subprocess.run([project_python, "-m", "pip", "--python", self.python,
                               "--disable-pip-version-check", "-q"] + list(args),
                              env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def install(self, wheel):
        """pip install the wheel (not editable; its dependencies come from the project venv)."""
        self.pip("install", "--no-deps", "--no-index", wheel)

    def files(self):
        """Every file and directory in the venv, relative to its root."""
        found = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                found.add(os.path.relpath(os.path.join(dirpath, name), self.root))
        return found


def build_wheel(python, out, **env):
    """Build a wheel of this checkout with ``python`` (a project venv's) into ``out``; return
    its path and the build's output."""
    proc = subprocess.run([python, "-m", "build", "--wheel", "--no-isolation", "--outdir", out,
                           REPO], env=clean_env(**env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
    assert proc.returncode == 0, proc.stdout
    return glob.glob(os.path.join(out, "mpcompat-*.whl"))[0], proc.stdout


@pytest.fixture(scope="session")
def wheel_for(tmp_path_factory):
    """Factory: ``wheel_for(version)`` is the wheel built from this checkout by that Python's
    project venv, built once per session."""
    built = {}

    def get(version="3.11"):
        if version not in built:
            out = str(tmp_path_factory.mktemp("wheel%s-" % version.replace(".", "")))
            python = os.path.join(PROJECT_VENVS[version], "bin", "python")
            built[version] = build_wheel(python, out)[0]
        return built[version]
    return get


@pytest.fixture(scope="session")
def wheel(wheel_for):
    """The wheel built from this checkout by Python 3.11 (path)."""
    return wheel_for("3.11")


@pytest.fixture(scope="session")
def repo():
    """The checkout's root directory."""
    return REPO


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """An empty working directory outside the checkout for every child."""
    return str(tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="session")
def make_venv(tmp_path_factory, workdir):
    """Factory: ``make_venv(version="3.11", wheel=None)`` returns a fresh :class:`Venv`."""

    def make(version="3.11", wheel=None):
        root = str(tmp_path_factory.mktemp("venv%s-" % version.replace(".", "")))
        shutil.rmtree(root)
        project = PROJECT_VENVS[version]
        subprocess.run([os.path.join(project, "bin", "python"), "-m", "venv", "--without-pip",
                        root], check=True, env=clean_env())
        venv = Venv(root, version, workdir)
        project_site = glob.glob(os.path.join(project, "lib", "python*", "site-packages"))[0]
        with open(os.path.join(venv.site_packages, "_main_venv.pth"), "w") as f:
            f.write(project_site + "\n")
        if wheel:
            venv.install(wheel)
        return venv
    return make


@pytest.fixture(scope="session")
def installed(make_venv, wheel):
    """A Python 3.11 venv with the wheel installed; tests must not change it."""
    return make_venv(wheel=wheel)


@pytest.fixture(scope="session")
def bare(make_venv):
    """A Python 3.11 venv without mpcompat, whose site-packages has a sitecustomize."""
    venv = make_venv()
    with open(os.path.join(venv.site_packages, "sitecustomize.py"), "w") as f:
        f.write(USER_SITECUSTOMIZE)
    proc = venv.run(["python", "-c", "import mpcompat"])
    assert "No module named 'mpcompat'" in proc.stderr, "mpcompat leaks into the test venvs"
    return venv
