"""Restricted unpicklers may trust ``mpcompat.rebuild_views`` and nothing else of mpcompat.

The natural allowlist for pickles with dict views trusts the module of the view rebuilders
(torch's ``weights_only`` allowlist is exactly the six of them). Before the view rebuilders
had a module of their own, that module also held ``rebuild_module`` (import any module) and
``rebuild_by_init`` (run any class's ``__init__``): a 60-byte pickle could then import ``sys``
and overwrite ``sys.path`` through BUILD. These tests build those attacks by hand.
"""
import io
import pickle
import sys

import pytest

from mpcompat import rebuild, rebuild_views

VIEW_REBUILDERS = ["rebuild_dict_keys", "rebuild_dict_values", "rebuild_dict_items",
                   "rebuild_odict_keys", "rebuild_odict_values", "rebuild_odict_items"]


class TrustTheViewModule(pickle.Unpickler):
    """An allowlist as users write it: every callable of the module the view rebuilders live
    in, plus plain builtins."""

    def find_class(self, module, name):
        if module == rebuild_views.rebuild_dict_keys.__module__ and name.startswith("rebuild_"):
            return getattr(sys.modules[module], name)
        if module == "builtins" and name in ("dict", "list", "tuple"):
            return getattr(__import__("builtins"), name)
        raise pickle.UnpicklingError("global %s.%s is not allowed" % (module, name))


def _load(data):
    return TrustTheViewModule(io.BytesIO(data)).load()


def _global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def test_the_view_module_holds_the_six_rebuilders_and_nothing_else_callable():
    public = {name: value for name, value in vars(rebuild_views).items()
              if not name.startswith("__")}
    callables = sorted(name for name, value in public.items() if callable(value))
    assert callables == sorted(VIEW_REBUILDERS)
    assert sorted(rebuild_views.__all__) == sorted(VIEW_REBUILDERS)


def test_views_load_through_the_restricted_unpickler():
    for view in ({"a": 1}.keys(), {"a": 1}.values(), {"a": 1}.items()):
        for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
            loaded = _load(pickle.dumps(view, protocol))
            assert type(loaded) is type(view) and list(loaded) == list(view)


def test_importing_a_module_and_overwriting_sys_path_is_refused():
    # rebuild_module('sys'), then BUILD {'path': ['/attacker']} on the module it returns
    attack = (b"\x80\x02" + _global(rebuild.rebuild_module.__module__, "rebuild_module")
              + b"X\x03\x00\x00\x00sys\x85R}X\x04\x00\x00\x00path]X\t\x00\x00\x00/attackerasb.")
    assert len(attack) < 90
    saved = list(sys.path)
    try:
        with pytest.raises(pickle.UnpicklingError, match="is not allowed"):
            _load(attack)
    finally:
        hijacked = sys.path != saved
        sys.path[:] = saved
    assert not hijacked


def test_rebuild_by_init_refuses_every_class_but_the_patched_ones():
    class Anything(object):
        def __init__(self, **kwargs):
            raise AssertionError("__init__ must not run")

    with pytest.raises(TypeError, match="rebuilds only nuscenes.eval.tracking.data_classes"):
        rebuild.rebuild_by_init(Anything, Anything, {}, {})
    # the same through a pickle that an unrestricted unpickler would load
    data = (b"\x80\x02" + _global("mpcompat.rebuild", "rebuild_by_init") + b"("
            + _global("subprocess", "Popen") + _global("subprocess", "Popen")
            + b"}X\x04\x00\x00\x00argsX\x04\x00\x00\x00trues}tR.")
    with pytest.raises(TypeError, match="rebuild_by_init rebuilds only"):
        pickle.loads(data)
