"""The ``sitecustomize`` that ``mpcompat run`` puts first on PYTHONPATH.

In every Python process started under ``mpcompat run`` (PYTHONPATH is inherited), it
1. activates mpcompat through the start-up hook ``_mpcompat_bootstrap`` (next to this file in a
   source checkout, at the root of site-packages once installed), also where no ``.pth`` file
   is processed;
2. makes the start method chosen with ``mpcompat run --start-method`` the default of
   multiprocessing, when multiprocessing is first imported;
3. runs the ``sitecustomize`` this one shadows (the next one on sys.path), as Python would have.
"""
import os
import sys


def _start():
    try:
        # Next to this file in a source checkout; at the root of site-packages once installed.
        import _mpcompat_bootstrap
    except ImportError as exc:
        return _say("mpcompat run: mpcompat is not installed for %s (%s)" % (sys.executable, exc))
    _mpcompat_bootstrap.main("mpcompat run")
    method = os.environ.get("MPCOMPAT_RUN_START_METHOD")
    if method:
        try:
            from mpcompat.cli.launcher import default_start_method
            default_start_method(method)
        except Exception as exc:
            _say("mpcompat run: could not make %r the default start method (%s: %s)"
                 % (method, type(exc).__name__, exc))


def _say(line):
    if sys.stderr is not None:
        sys.stderr.write(line + "\n")


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
    # The import that is running this file returns whatever sys.modules holds when it ends,
    # so the shadowed module becomes ``sitecustomize`` just as if it had been found first.
    # Its errors propagate, and site reports them as it would have without mpcompat.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _start()
except Exception:  # the hook itself reports its errors; nothing here may stop start-up
    pass
_chain()
