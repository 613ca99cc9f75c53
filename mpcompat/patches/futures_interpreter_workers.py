"""Patch ``concurrent_futures.interpreter_workers``: an ``InterpreterPoolExecutor`` (Python
3.14+) task whose arguments or result cannot be sent between interpreters says what and why.

What is not natively shareable travels between interpreters by pickle. When it cannot, CPython
raises ``NotShareableError: (Queue(1), <function f>, ({...},), {}) does not support
cross-interpreter data`` (an argument) or ``NotShareableError: object does not support
cross-interpreter data`` (a result): no path, no reason.

``WorkerContext.run`` (in the thread that hands a task to its interpreter) is wrapped:
- It sends the call as ``call_and_pack(fn, args, kwargs)``, a module-level function here that
  runs in the worker interpreter, calls ``fn``, and returns a result of a natively shareable
  type (None, bool, int, float, str, bytes) as it is, any other pickled (such a result was
  pickled anyway). A result that cannot be pickled raises there, with mpcompat's note naming
  its path (``result[...]``), and reaches the caller as the task's exception. The wrapper
  unpickles what came back pickled.
- A ``NotShareableError`` of the call itself: the task's ``fn``, ``args`` and ``kwargs`` are
  walked here and the note names the path (``args[0]['a'].lock``) and the fix.

Exceptions raised by ``fn`` pass through unchanged. Plain functions, no wrapt: the standard
library patches do not import it.
"""
import functools
import pickle

from mpcompat.patching.patcher import Patcher

patcher = Patcher()

_ARGS = ("A task could not be sent to the InterpreterPoolExecutor's interpreters: pickling it "
         "failed.")
_RESULT = ("The result of a task could not be sent back from its interpreter: pickling it "
           "failed.")


# Results of these exact types are shared natively, without pickle: passed on as they are.
_SHAREABLE = (type(None), bool, int, float, str, bytes)


def call_and_pack(fn, args, kwargs):
    """In a worker interpreter: ``fn(*args, **kwargs)``, as ``(False, result)`` when the result
    is natively shareable, else ``(True, pickled result)``. A result that cannot be pickled
    raises its pickling error with mpcompat's note. (Pickles of tasks name this function: it
    stays at this path.)"""
    result = fn(*args, **kwargs)
    if type(result) in _SHAREABLE:
        return False, result
    try:
        return True, pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        from mpcompat.diagnose.notes import parts_failed
        parts_failed(exc, _RESULT, [("result", result)], "result")
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
            parts_failed(exc, _ARGS, parts, "task")
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
