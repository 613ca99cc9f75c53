"""Write the golden pickles of mpcompat's rebuild functions: ``python tests/golden/make_golden.py``.

Each file ``<kind>.protocol<N>.pickle`` holds ``pickle.dumps(view, N)`` of a view of ``kind``
over ``GOLDEN_PAIRS`` (``module.protocol<N>.pickle`` holds the ``json`` module), as written
by mpcompat 0.1.0 on CPython 3.11 (``.venv``) with::

    cd /work/main && PYTHONPATH=$PWD .venv/bin/python tests/golden/make_golden.py

The files are committed and must never be regenerated to make a test pass: they stand for
pickles that users already have on disk and in flight between processes. tests/core/
test_golden.py loads every one of them and checks type and contents, so moving, renaming or
changing the signature of a function in ``mpcompat.rebuild_views`` or ``mpcompat.rebuild``
fails loudly. (Regenerated once, before any release, when the view rebuilders moved from
``mpcompat.rebuild`` to ``mpcompat.rebuild_views``: see patches.md.) When mpcompat's
output format changes on purpose, add new files next to these (for example with a version
suffix) and keep the old ones loading.
"""
import os
import pickle
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = range(0, 6)
VIEW_KINDS = ("dict_keys", "dict_values", "dict_items",
              "odict_keys", "odict_values", "odict_items")
# Order matters (it must survive); keys and values cover str (non-ASCII), int (large),
# None, tuples, nested containers and bytes.
GOLDEN_PAIRS = [
    ("car", 50),
    ("v\u00e9lo \u81ea\u884c\u8f66", [1, 2.5, None]),
    (2 ** 80, {"nested": ("t", 3)}),
    (None, b"\x00\xffbytes"),
    ((1, "two"), "last"),
]
MODULE_NAME = "json"


def golden_view(kind):
    """The view of ``kind`` that the golden files hold."""
    mapping = (OrderedDict if kind.startswith("odict_") else dict)(GOLDEN_PAIRS)
    return getattr(mapping, kind.split("_", 1)[1])()


def file_name(kind, protocol):
    return "%s.protocol%d.pickle" % (kind, protocol)


def expected_files():
    """Every golden file name, mapped to ``(kind, protocol)``; kind "module" is the module."""
    return {file_name(kind, protocol): (kind, protocol)
            for kind in VIEW_KINDS + ("module",) for protocol in PROTOCOLS}


def main():
    import importlib
    import mpcompat
    if not mpcompat.is_active():
        sys.exit("mpcompat is not active (MPCOMPAT_DISABLE set?): nothing to write")
    for name, (kind, protocol) in sorted(expected_files().items()):
        obj = importlib.import_module(MODULE_NAME) if kind == "module" else golden_view(kind)
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(pickle.dumps(obj, protocol))
        print("wrote tests/golden/%s" % name)


if __name__ == "__main__":
    main()
