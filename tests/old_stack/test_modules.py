"""The module reducer: importable modules pickle as references, others fail naming why."""
import copy
import importlib.util
import json
import os.path
import pickle
import sys
import types
import xml.dom.minidom

import pytest

import mpcompat  # noqa: F401  (active: registers the module reducer)
import libs_workers
import workers


def test_importable_modules_pickle_as_references():
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(json, protocol)
        assert b"rebuild_module" in data and len(data) < 80
        assert pickle.loads(data) is json
    assert copy.deepcopy({"m": os.path})["m"] is os.path
    assert copy.copy(xml.dom.minidom) is xml.dom.minidom


def test_modules_reach_a_spawn_child_as_its_own_modules(spawn_pool):
    # xml.dom.minidom is not imported in a fresh child: unpickling imports it there.
    sent = {"json": json, "path": os.path, "minidom": xml.dom.minidom}
    assert spawn_pool.apply(libs_workers.module_identity, (sent,)) == {
        "json": ("json", True), "path": (os.path.__name__, True),
        "minidom": ("xml.dom.minidom", True)}


def test_main_module_fails_naming_it(spawn_pool):
    with pytest.raises(TypeError, match="cannot pickle module '__main__': a child "
                                                   "process has a __main__ module of its own"):
        pickle.dumps({"main": sys.modules["__main__"]})
    with pytest.raises(TypeError, match="cannot pickle module '__main__'"):
        spawn_pool.apply(workers.echo, (sys.modules["__main__"],))


def _load_from_file(path, name):
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_loaded_under_a_temporary_name_fails_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "tmpk3x9q_config.py"
    path.write_text("lr = 0.02\n")
    module = _load_from_file(path, "tmpk3x9q_config")  # as mmcv loads config files
    with pytest.raises(TypeError) as info:
        pickle.dumps({"cfg": module})
    message = str(info.value)
    assert message.startswith("cannot pickle module 'tmpk3x9q_config': "
                              "sys.modules['tmpk3x9q_config'] is missing")
    assert "loaded from files under temporary names" in message
    monkeypatch.setitem(sys.modules, "tmpk3x9q_config", _load_from_file(path, "tmpk3x9q_config"))
    with pytest.raises(TypeError, match=r"sys.modules\['tmpk3x9q_config'\] is "
                                                   r"another object"):
        pickle.dumps(module)


def test_module_without_a_name_fails():
    module = types.ModuleType("nameless")
    del module.__name__
    with pytest.raises(TypeError, match="it has no __name__ to import it by"):
        pickle.dumps(module)
