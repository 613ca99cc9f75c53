"""Reducer for module objects: an importable module pickles as a reference to its name.

mmcv before 1.4.8 keeps the modules a config file imports (``import numpy as np`` next to
``_base_``) inside ``Config``; datasets sometimes keep a module as an attribute. The standard
library refuses both with ``cannot pickle 'module' object``.
"""
import sys

from mpcompat.rebuild import rebuild_module

MODULE_TYPE = type(sys)  # types.ModuleType, without importing types (start-up time)
# A child process has a __main__ of its own; the parent's cannot be imported there by name.
_UNIMPORTABLE = frozenset(["__main__", "__mp_main__"])


def reduce_module(module, _modules=sys.modules, _rebuild=rebuild_module):
    """Reduce a module to its import name; refuse one the receiving process cannot import."""
    name = getattr(module, "__name__", None)
    if isinstance(name, str) and _modules.get(name) is module and name not in _UNIMPORTABLE:
        return _rebuild, (name,)
    # TypeError, as the standard library raises for every module: callers catching it still do.
    if not isinstance(name, str):
        raise TypeError(
            "cannot pickle module %r: it has no __name__ to import it by" % (module,))
    if name in _UNIMPORTABLE:
        raise TypeError(
            "cannot pickle module %r: a child process has a __main__ module of its own, not "
            "this one. Keep a reference to an importable module instead, or move what it "
            "provides into one." % name)
    raise TypeError(
            "cannot pickle module %r: sys.modules[%r] is %s, so a child process importing %r "
            "would not get this module (modules loaded from files under temporary names, such "
            "as config files, cannot be imported by name). Keep the values it defines instead "
            "of the module itself." % (
                name, name, "missing" if name not in _modules else "another object", name))
