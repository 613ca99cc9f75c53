"""mpcompat.patcher.Patcher on real modules, classes, functions and dicts: replace,
wrap, replace_item and a switched ``__class__`` are put back by restore(), per target and only
where the replacement is still ours."""
import types

import pytest

from mpcompat.patcher import Patcher


def make_module(name="mpc_patcher_target"):
    module = types.ModuleType(name)
    exec("def func(x):\n    return x\n", module.__dict__)
    return module


class Base(object):
    def inherited(self):
        return "base"


class Owner(Base):
    def method(self):
        return "original"

    @classmethod
    def make(cls):
        return cls


Owner.__module__ = "mpc_patcher_classes"


def test_replace_and_restore_put_back_the_original():
    module, patcher = make_module(), Patcher()
    original = module.func
    ours = patcher.replace(module, "func", lambda x: -x)
    assert module.func is ours and module.func(2) == -2
    assert patcher.original(module, "func") is original
    assert patcher.applied() == [(module, "func")]
    patcher.restore(module)
    assert module.func is original and patcher.applied() == []
    patcher.restore(module)  # idempotent
    assert module.func is original


def test_replacing_ours_again_keeps_the_first_original():
    module, patcher = make_module(), Patcher()
    original = module.func
    patcher.replace(module, "func", lambda x: 1)
    patcher.replace(module, "func", lambda x: 2)
    assert patcher.original(module, "func") is original
    patcher.restore(module)
    assert module.func is original


def test_restore_leaves_what_somebody_set_after_us():
    module, patcher = make_module(), Patcher()
    patcher.replace(module, "func", lambda x: 1)

    def theirs(x):
        return 3
    module.func = theirs
    assert patcher.original(module, "func") is theirs and patcher.applied() == []
    patcher.restore(module)
    assert module.func is theirs


def test_restore_only_the_target_given():
    first, second, patcher = make_module("mpc_first"), make_module("mpc_second"), Patcher()
    originals = first.func, second.func
    patcher.replace(first, "func", len)
    patcher.replace(second, "func", len)
    patcher.replace(second, "extra", len, target="mpc_first")  # belongs to mpc_first
    patcher.restore(first)
    assert first.func is originals[0] and not hasattr(second, "extra")
    assert second.func is len
    patcher.restore()  # every target
    assert second.func is originals[1]


def test_an_inherited_method_is_replaced_on_the_class_and_deleted_again():
    patcher = Patcher()
    assert patcher.original(Owner, "inherited") is Base.__dict__["inherited"]
    patcher.replace(Owner, "inherited", lambda self: "ours")
    assert Owner().inherited() == "ours"
    patcher.restore(Owner.__module__)
    assert "inherited" not in Owner.__dict__ and Owner().inherited() == "base"


def test_a_classmethod_stays_a_classmethod():
    patcher = Patcher()
    original = Owner.__dict__["make"]
    assert patcher.original(Owner, "make") is original  # the descriptor, not a bound method
    patcher.replace(Owner, "make", classmethod(lambda cls: ("ours", cls)))
    assert Owner.make() == ("ours", Owner)
    patcher.restore(Owner.__module__)
    assert Owner.__dict__["make"] is original and Owner.make() is Owner


def test_wrap_keeps_the_original_reachable_and_restore_unwraps():
    pytest.importorskip("wrapt")
    patcher = Patcher()
    original = Owner.__dict__["method"]
    calls = []

    def wrapper(wrapped, instance, args, kwargs):
        calls.append(instance)
        return "wrapped " + wrapped(*args, **kwargs)
    patcher.wrap(Owner, "method", wrapper)
    obj = Owner()
    assert obj.method() == "wrapped original" and calls == [obj]
    assert Owner.__dict__["method"].__wrapped__ is original
    patcher.wrap(Owner, "method", wrapper)  # wraps the original again, not our wrapper
    assert Owner().method() == "wrapped original"
    wrapped_make = patcher.wrap(Owner, "make", lambda wrapped, instance, args, kwargs: wrapped())
    assert Owner.make() is Owner and wrapped_make.__wrapped__ is patcher.original(Owner, "make")
    patcher.restore(Owner.__module__)
    assert Owner.__dict__["method"] is original and type(Owner.__dict__["make"]) is classmethod


def test_replace_item_adds_or_replaces_a_key_and_restore_puts_it_back():
    registry, patcher = {"kept": 1, "replaced": 2}, Patcher()
    patcher.replace_item(registry, "added", 3, "mpc_registry")
    patcher.replace_item(registry, "replaced", 4, "mpc_registry")
    patcher.replace_item(registry, "replaced", 5, "mpc_registry")  # ours again: first original
    patcher.replace(make_module("mpc_registry"), "func", len)  # an attribute is another record
    assert registry == {"kept": 1, "replaced": 5, "added": 3}
    assert sorted(name for _, name in patcher.applied()) == ["added", "func", "replaced"]
    patcher.restore("mpc_registry")
    assert registry == {"kept": 1, "replaced": 2}


def test_replace_item_leaves_an_item_somebody_set_after_us():
    registry, patcher = {}, Patcher()
    patcher.replace_item(registry, "key", "ours", "mpc_registry")
    registry["key"] = "theirs"
    patcher.restore("mpc_registry")
    assert registry == {"key": "theirs"}


class Plain(object):
    pass


class Switched(Plain):
    __slots__ = ()


def test_class_switch_keeps_the_object_and_is_put_back():
    obj, patcher = Plain(), Patcher()
    obj.data = [1]
    patcher.replace(obj, "__class__", Switched, target="mpc_switch")
    patcher.replace(obj, "__class__", Switched, target="mpc_switch")
    assert type(obj) is Switched and obj.data == [1]
    assert patcher.original(obj, "__class__") is Plain
    patcher.restore("mpc_switch")
    assert type(obj) is Plain and obj.data == [1]


def test_class_switched_again_by_somebody_else_stays():
    obj, patcher = Plain(), Patcher()

    class Theirs(Plain):
        __slots__ = ()
    patcher.replace(obj, "__class__", Switched, target="mpc_switch")
    obj.__class__ = Theirs
    patcher.restore("mpc_switch")
    assert type(obj) is Theirs


def test_qualname_of_a_function_is_put_back():
    module, patcher = make_module(), Patcher()
    func = module.func
    patcher.replace(func, "__qualname__", "renamed", target=module.__name__)
    assert func.__qualname__ == "renamed" and patcher.original(func, "__qualname__") == "func"
    patcher.restore(module)
    assert func.__qualname__ == "func"
