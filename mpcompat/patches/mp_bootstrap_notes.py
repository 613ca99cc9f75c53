"""Patch ``multiprocessing.bootstrap_notes``: the missing-main-guard error names the line.

A spawn or forkserver child imports the main module again; module-level code that starts a
process then raises "An attempt has been made to start a new process before the current process
has finished its bootstrapping phase" from ``multiprocessing.spawn._check_not_importing_main``
(called through the module's globals by ``get_preparation_data``). The hook adds a note naming
the file and line of the main module that started the process, with the ``if __name__ ==
"__main__":`` fix. It runs once per process start and does nothing unless the check raises.
"""
import functools

from mpcompat.patch_table import Skip

_MARK = "_mpcompat_bootstrap_notes"


def _wrap(original):
    @functools.wraps(original)
    def _check_not_importing_main():
        try:
            return original()
        except RuntimeError as exc:
            try:
                from mpcompat.diagnose.notes import bootstrap_failed
                bootstrap_failed(exc)
            except Exception:
                pass
            raise
    setattr(_check_not_importing_main, _MARK, True)
    return _check_not_importing_main


def apply(module):
    """Hook ``module._check_not_importing_main`` (``multiprocessing.spawn``)."""
    check = module.__dict__.get("_check_not_importing_main")
    if not callable(check):
        raise Skip("multiprocessing.spawn has no _check_not_importing_main()")
    if not getattr(check, _MARK, False):
        module._check_not_importing_main = _wrap(check)


def revert(module):
    """Put back the original check where ours is in place."""
    check = module.__dict__.get("_check_not_importing_main")
    if getattr(check, _MARK, False):
        module._check_not_importing_main = check.__wrapped__
