"""The newest torch installable here is tested by CI and inside TORCH_TESTED (issue 33: a new torch
release must never go unnoticed, nor switch mpcompat's fixes off).

"Installable here" is what ``pip install torch`` would take: pip's own answer with this
machine's pip configuration, its constraint file (a cap on torch) included, for this Python.
It fails, naming the release and what to update, when that release is above every
``torch==`` pin in .ci/requirements-*.txt or outside TORCH_TESTED. In CI (``CI=true``) a registry
that cannot be asked fails the test; elsewhere the test is skipped with pip's reason.
.ci/test runs it once, on .venv (Python 3.11); it needs no torch.
"""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from mpcompat.patching import TORCH_TESTED
from mpcompat import patching
from testenv import REPO

PIN = re.compile(r"^\s*torch\s*==\s*([0-9][^\s;#]*)", re.MULTILINE)


class RegistryUnreachable(Exception):
    """pip could not say which torch it would install (no registry, no network)."""


def torch_pins(pattern=os.path.join(REPO, ".ci", "requirements-*.txt")):
    """``{file name: torch version}`` of every ``torch==X`` pin in the CI requirements files."""
    pins = {}
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            found = PIN.search(f.read())
        if found:
            pins[os.path.basename(path)] = found.group(1)
    return pins


def uncovered(newest, pins, tested):
    """What to update so that torch ``newest`` is covered ([] when it is): a CI pin at least as
    new, and ``tested`` (TORCH_TESTED, e.g. ">=1.9,<2.15") containing it."""
    problems = []
    release = patching.parse(newest)
    if not pins or all(patching.parse(v) < release for v in pins.values()):
        problems.append(
            "torch %s is installable but no CI venv tests it (torch pins: %s): add a "
            ".ci/requirements-*.txt pinning torch==%s, its venv to .ci/setup and its run to "
            ".ci/test" % (newest, ", ".join("%s in %s" % (v, name) for name, v in sorted(
                pins.items())) or "none", newest))
    if not patching.in_range(newest, tested):
        problems.append(
            "torch %s is outside TORCH_TESTED %r (mpcompat/patching.py): once CI tests "
            "it, widen the range (and the README's and patches.md's tested versions)"
            % (newest, tested))
    return problems


def newest_installable_torch(env=None, timeout=180):
    """The torch version pip would install here; RegistryUnreachable with pip's reason."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--no-deps", "--quiet", "--report", "-", "--timeout", "20", "--retries", "1",
               "torch"]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RegistryUnreachable("pip took over %d s to answer" % timeout)
    if done.returncode != 0:
        raise RegistryUnreachable("pip exited %d: %s" % (
            done.returncode, done.stderr.strip()[-800:] or done.stdout.strip()[-800:]))
    report = json.loads(done.stdout)
    found = [item["metadata"]["version"] for item in report["install"]
             if item["metadata"]["name"].lower() == "torch"]
    assert found, "pip's report names no torch: %s" % done.stdout[:800]
    return found[0]


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def test_newest_installable_torch_is_covered():
    try:
        newest = newest_installable_torch()
    except RegistryUnreachable as exc:
        message = "cannot tell the newest installable torch: %s" % exc
        if in_ci():
            pytest.fail(message + " (CI=true: the check must run in CI)", pytrace=False)
        pytest.skip(message)
    problems = uncovered(newest, torch_pins(), TORCH_TESTED)
    assert not problems, "\n".join(problems)


def test_the_ci_pins_are_read():
    pins = torch_pins()
    assert pins["requirements-38.txt"] == "1.9.1"
    assert pins["requirements-311.txt"] == "2.13.0"
    assert all(patching.in_range(v, TORCH_TESTED) for v in pins.values()), pins


def test_a_torch_newer_than_every_pin_fails_naming_what_to_update():
    old_pins = {"requirements-38.txt": "1.9.1", "requirements-311.txt": "2.13.0"}
    problems = uncovered("2.14.1", old_pins, ">=1.9,<2.14")
    assert len(problems) == 2
    assert "torch 2.14.1 is installable but no CI venv tests it" in problems[0]
    assert "2.13.0 in requirements-311.txt" in problems[0] and "torch==2.14.1" in problems[0]
    assert "torch 2.14.1 is outside TORCH_TESTED '>=1.9,<2.14'" in problems[1]
    # Pinned in CI but the range not widened yet; in the range but pinned nowhere.
    assert uncovered("2.14.1", dict(old_pins, x="2.14.1"), ">=1.9,<2.14") == problems[1:]
    assert uncovered("2.14.1", old_pins, ">=1.9,<2.15") == problems[:1]
    assert len(uncovered("2.14.1", {}, ">=1.9,<2.15")) == 1


def test_a_covered_torch_passes():
    pins = {"requirements-38.txt": "1.9.1", "requirements-312.txt": "2.14.1"}
    assert uncovered("2.14.1", pins, ">=1.9,<2.15") == []
    assert uncovered("2.14.0", pins, ">=1.9,<2.15") == []  # older than the newest pin
    assert uncovered("2.14.1+cpu", pins, ">=1.9,<2.15") == []


def test_an_unreachable_registry_fails_in_ci_and_skips_elsewhere(monkeypatch):
    def unreachable():
        raise RegistryUnreachable("pip exited 1: network is unreachable")
    monkeypatch.setattr(sys.modules[__name__], "newest_installable_torch", unreachable)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="network is unreachable .CI=true"):
        test_newest_installable_torch_is_covered()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="cannot tell the newest installable torch"):
        test_newest_installable_torch_is_covered()


def test_a_registry_that_refuses_connections_is_unreachable():
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="",
               PIP_INDEX_URL="http://127.0.0.1:9/simple")  # the discard port: nothing listens
    with pytest.raises(RegistryUnreachable, match="pip exited 1: .*torch"):
        newest_installable_torch(env=env, timeout=120)
