"""The ``sitecustomize`` that ``mpcompat run`` puts first on PYTHONPATH.

In every Python process started under ``mpcompat run`` (PYTHONPATH is inherited), it
activates mpcompat through the start-up hook ``_mpcompat_bootstrap`` (also where no ``.pth``
file is processed), makes the start method of ``mpcompat run --start-method`` the default of
multiprocessing, and runs the ``sitecustomize`` this one shadows, as Python would have.
"""
import os
import sys


def _start():
    """Activate mpcompat, set the start method; return what went wrong, if anything."""
    try:
        # Next to this file in a source checkout; at the root of site-packages once installed.
        import _mpcompat_bootstrap
    except ImportError as exc:
        return "mpcompat run: mpcompat is not installed for %s (%s)" % (sys.executable, exc)
    _mpcompat_bootstrap.main("mpcompat run")
    method = os.environ.get("MPCOMPAT_RUN_START_METHOD")
    if method:
        try:
            from mpcompat.cli.launcher import default_start_method
            default_start_method(method)
        except Exception as exc:
            return "mpcompat run: could not make %r the default start method (%s: %s)" % (
                method, type(exc).__name__, exc)


def _chain():
    """Execute the sitecustomize found on sys.path after this file's directory, if any."""
    here = os.path.dirname(os.path.realpath(__file__))
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    from importlib.machinery import PathFinder
    spec = PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec
    module = module_from_spec(spec)
    # The import running this file returns what sys.modules holds when it ends: the shadowed
    # module becomes ``sitecustomize`` as if found first. Its errors propagate, and site
    # reports them as it would have without mpcompat.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _problem = _start()
    if _problem and sys.stderr is not None:
        sys.stderr.write(_problem + "\n")
except Exception:  # the hook itself reports its errors; nothing here may stop start-up
    pass
_chain()
