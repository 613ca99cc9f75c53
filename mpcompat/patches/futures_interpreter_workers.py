"""Patch ``concurrent_futures.interpreter_workers``: an ``InterpreterPoolExecutor`` (3.14+) task
whose arguments or result cannot be sent between interpreters says what and why (patches.md).

``WorkerContext.run`` (plain functions: standard-library patches never import wrapt) sends the
call as :func:`call_and_pack`, which pickles the result in the worker interpreter, and names the
path of what a ``NotShareableError`` of the call could not send.
"""
import functools
import pickle

from mpcompat.patcher import Patcher

patcher = Patcher()
# Results of these exact types are shared natively, without pickle: passed on as they are.
_SHAREABLE = (type(None), bool, int, float, str, bytes)


def call_and_pack(fn, args, kwargs):
    """In a worker interpreter: ``fn(*args, **kwargs)`` as ``(False, result)`` when natively
    shareable, else ``(True, pickled result)``. (Pickles of tasks name it: it stays here.)"""
    result = fn(*args, **kwargs)
    if type(result) in _SHAREABLE:
        return False, result
    try:
        return True, pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        from mpcompat.diagnose.notes import parts_failed
        parts_failed(exc, "The result of a task could not be sent back from its interpreter: "
                     "pickling it failed.", [("result", result)], "result")
        raise


def _run(original, not_shareable):
    @functools.wraps(original)
    def run(self, task):
        if not (type(task) is tuple and len(task) == 3):
            return original(self, task)
        fn, args, kwargs = task
        try:
            packed = original(self, (call_and_pack, (fn, args, kwargs), {}))
        except not_shareable as exc:
            from mpcompat.diagnose.notes import parts_failed
            parts = [("fn", fn)] + [("args[%d]" % i, a) for i, a in enumerate(args)]
            parts += [("kwargs[%r]" % (k,), v) for k, v in kwargs.items()]
            parts_failed(exc, "A task could not be sent to the InterpreterPoolExecutor's "
                         "interpreters: pickling it failed.", parts, "task")
            raise
        pickled, value = packed
        return pickle.loads(value) if pickled else value
    return run


def apply(module):
    """Wrap ``WorkerContext.run`` of ``concurrent.futures.interpreter``."""
    from concurrent import interpreters  # novermin (the target exists from 3.14 on)
    cls = module.WorkerContext
    patcher.replace(cls, "run", _run(patcher.original(cls, "run"),
                                     interpreters.NotShareableError))


def revert(module):
    """Put back what ``apply`` replaced, where ours is still in place."""
    patcher.restore(module)
