"""Functions and classes that tests send to child processes (importable by name there).

Add functions here rather than in test modules: a spawn child can import ``workers`` because
``tests/`` is on the sys.path it inherits. Append new helpers in a section of their own; keep
this module importable without torch, numpy or mpcompat (import those inside functions).
"""
import os
from collections import OrderedDict


def echo(obj):
    """Return ``obj`` as received, so the parent sees the full round trip."""
    return obj


def describe(obj):
    """Return ``(type name, list(obj))`` of a view as the child received it."""
    return type(obj).__name__, list(obj)


def mpcompat_active():
    """Whether mpcompat is active in the child (it is imported by unpickling a view)."""
    import sys
    mod = sys.modules.get("mpcompat")
    return mod is not None and mod.is_active()


# --- dict views: building them and describing them without views --------------------------

VIEW_KINDS = ("dict_keys", "dict_values", "dict_items",
              "odict_keys", "odict_values", "odict_items")


def make_view(kind, pairs):
    """Return a view of ``kind`` (one of VIEW_KINDS) over a fresh dict/OrderedDict of pairs."""
    mapping = (OrderedDict if kind.startswith("odict_") else dict)(pairs)
    part = kind.split("_", 1)[1]
    return getattr(mapping, part)()


def view_types():
    """Return ``{kind name: view type}`` for the six view types."""
    return {kind: type(make_view(kind, ())) for kind in VIEW_KINDS}


_VIEW_TYPES = frozenset(view_types().values())


def canon(obj, leaf=None):
    """Describe ``obj`` with plain, comparable values: views and containers become
    ``(exact type name, [canon of each element, in order])``, a dict lists its items in order.
    Anything else is returned as is, or as ``leaf(obj)`` when ``leaf`` is given.

    Two objects have equal ``canon`` when they hold the same types, in the same order, with
    the same contents (a view's ``==`` cannot say that: values views compare by identity).
    """
    cls = type(obj)
    if cls in _VIEW_TYPES or cls is list or cls is tuple:
        return (cls.__name__, [canon(item, leaf) for item in obj])
    if cls is dict or cls is OrderedDict:
        return (cls.__name__, [(canon(k, leaf), canon(v, leaf)) for k, v in obj.items()])
    return obj if leaf is None else leaf(obj)


def canon_in_child(obj):
    """``canon(obj)`` as this child process received ``obj``, with the child's pid."""
    return os.getpid(), canon(obj)


def views_from_child(kind_pairs):
    """Build views in the child and send them back: ``[(kind, pairs), ...] -> [view, ...]``.

    The child pickles the result, so mpcompat must be active there: it is imported here as a
    child started by hand would not have unpickled a view yet.
    """
    import mpcompat  # noqa: F401  (activates)
    return [make_view(kind, pairs) for kind, pairs in kind_pairs]


def roundtrip_in_child(obj):
    """Return ``(canon(obj), obj)``: what the child saw, and the object pickled back."""
    return canon(obj), obj


def describe_and_state(obj):
    """``(describe(obj), mpcompat_active())`` in the child that received ``obj``."""
    return describe(obj), mpcompat_active()


def put_roundtrip(queue, obj):
    """Process target: put ``(pid, canon(obj), obj)`` on ``queue``."""
    queue.put((os.getpid(), canon(obj), obj))


# --- a user type with a user reducer (tests/core/test_registry.py) ------------------------

class Handle(object):
    """A user object that default pickling refuses (it holds a lock): only a reducer helps."""

    def __init__(self, name, payload=None):
        import threading
        self.name = name
        self.payload = payload
        self.lock = threading.Lock()


def rebuild_handle(name, payload):
    """Rebuild function named by ``reduce_handle``'s output."""
    handle = Handle(name, payload)
    handle.rebuilt = True
    return handle


def reduce_handle(handle):
    """The user reducer for Handle: ship the name and payload, make a fresh lock."""
    return rebuild_handle, (handle.name, handle.payload)


def handle_report(handle):
    """What a child sees of a Handle: type, name, canon(payload), rebuilt by the reducer."""
    return (type(handle).__module__, type(handle).__name__, handle.name, canon(handle.payload),
            getattr(handle, "rebuilt", False), type(handle.lock).__name__)


# --- torch DataLoader over a dataset that keeps views (tests/torch) -----------------------

class ViewDataset(object):
    """A map-style dataset (torch needs no base class) whose state holds dict views."""

    def __init__(self, n):
        self.class_range = OrderedDict([("car", 50), ("truck", 50), ("pedestrian", 40)])
        self.class_names = self.class_range.keys()
        plain = {"a": 1, "b": [2, 3]}
        self.views = {"keys": plain.keys(), "values": plain.values(), "items": plain.items()}
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return {"index": index, "pid": os.getpid(), "class_names": self.class_names,
                "seen": canon(self.views), "made_here": {index: str(index)}.items()}


def collate_as_list(batch):
    """A collate_fn that keeps the samples (and their views) as they are."""
    return batch
