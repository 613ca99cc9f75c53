"""``mpcompat run``: mpcompat active in a command and all its Python descendants, also where
mpcompat is not installed; ``--start-method`` changes the default start method everywhere; the
sitecustomize it shadows still runs; the exit code is the command's."""
import os
import shutil

import pytest


def test_not_installed_child_and_grandchild_are_active(bare, repo):
    report = bare.report("probe.py", prefix=bare.launcher_from_source())
    for process in (report, report["child"]):
        assert process["active"] is True
        assert process["mpcompat_file"] == os.path.join(repo, "mpcompat", "__init__.py")
        assert process["bootstrap_calls"] == ["mpcompat run"]
        # The venv's own sitecustomize, which the one of `mpcompat run` shadows, still ran.
        assert process["sitecustomize"] == os.path.join(bare.site_packages, "sitecustomize.py")
        assert process["marker"] == process["sitecustomize"]
        assert process["default_start_method"] == "fork"


def test_a_sitecustomize_on_the_users_pythonpath_still_runs(bare, tmp_path):
    shutil.copy(os.path.join(bare.site_packages, "sitecustomize.py"), str(tmp_path))
    report = bare.report("probe.py", prefix=bare.launcher_from_source(),
                         PYTHONPATH=str(tmp_path))
    for process in (report, report["child"]):
        assert process["active"] is True
        assert process["marker"] == process["sitecustomize"] == str(tmp_path / "sitecustomize.py")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_start_method_becomes_the_default_but_stays_unset(bare, method):
    report = bare.report("probe.py", prefix=bare.launcher_from_source("--start-method", method))
    for process in (report, report["child"]):
        assert (process["start_method_set"], process["default_start_method"]) == (None, method)


@pytest.mark.parametrize("start_method, disabled", [("spawn", False), ("spawn", True),
                                                    (None, True)],
                         ids=["spawn", "spawn-MPCOMPAT_DISABLE", "default-MPCOMPAT_DISABLE"])
def test_a_spawn_only_failure_is_reproduced_and_fixed(bare, start_method, disabled):
    # loader.py never chooses a start method: the DataLoader uses the default one.
    options = ["--start-method", start_method] if start_method else []
    env = {"MPCOMPAT_DISABLE": "1"} if disabled else {}
    report = bare.report("loader.py", "default", prefix=bare.launcher_from_source(*options),
                         quiet=not disabled, **env)
    assert report["default_start_method"] is None
    assert report["torch_start_method"] == (start_method or "fork")
    if start_method and disabled:  # what a macOS or Windows user sees without mpcompat
        assert report["error"] == "TypeError: cannot pickle 'dict_keys' object"
    else:
        assert report["result"] == [["dict_keys", ["car", "pedestrian"]]] * 2
        assert report["worker_active"] == [not disabled] * 2


def test_installed_console_script_with_the_pth(installed):
    report = installed.report("probe.py", prefix=["mpcompat", "run", "--start-method",
                                                  "spawn", "--", installed.python])
    for process in (report, report["child"]):
        assert process["active"] is True
        assert process["bootstrap_calls"][0] == "mpcompat.pth"  # the .pth comes first
        assert process["bootstrap_calls"][-1] == "mpcompat run"
        assert process["default_start_method"] == "spawn"
        assert process["mpcompat_file"].startswith(installed.site_packages)


def test_status_names_the_route(bare, repo):
    proc = bare.run(bare.launcher_from_source() + ["-m", "mpcompat", "status"])
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()[:2]
    assert first.endswith(": active in this process, activated at start-up by 'mpcompat run'")
    assert second == ("auto-activation at interpreter start: not installed (mpcompat is "
                      "imported from %s), but 'mpcompat run' activates it in every process of "
                      "its command" % repo)


def test_exit_code_is_the_commands(installed):
    proc = installed.run(["python", "-m", "mpcompat", "run", "--", installed.python, "-c",
                          "import sys; sys.exit(3)"])
    assert (proc.returncode, proc.stderr) == (3, "")
    proc = installed.run(["mpcompat", "run", "--", "no-such-command-here"])
    assert proc.returncode == 127
    assert proc.stderr.startswith("mpcompat run: cannot run 'no-such-command-here'")
