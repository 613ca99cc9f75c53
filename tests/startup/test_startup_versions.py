"""The start-up hook on the oldest and newest supported Pythons (3.8 and 3.13, torch-free)."""
import os

import pytest


@pytest.mark.parametrize("version", ["3.8", "3.13"])
def test_the_pth_activates_in_the_interpreter_and_a_spawn_child(make_venv, wheel_for, version):
    wheel = wheel_for(version)
    assert os.path.basename(wheel).endswith("-py3-none-any.whl")  # pure Python
    venv = make_venv(version, wheel=wheel)
    report = venv.report("plain.py")
    assert report["mpcompat_file"].startswith(venv.site_packages)
    assert report["result"][0] == ["dict_keys", ["car", "pedestrian"]]
    assert report["view_reducer"] == "mpcompat.activation"
    report = venv.report("pool.py", "spawn")
    assert report["child_active"] is True
    report = venv.report("plain.py", MPCOMPAT_DISABLE="1")
    assert report["error"] == "TypeError: cannot pickle 'dict_keys' object"
