"""Patch ``concurrent_futures.interpreter_workers``: an ``InterpreterPoolExecutor`` (Python
3.14+) task whose arguments or result cannot be sent between interpreters says what and why.

What is not natively shareable travels between interpreters by pickle. When it cannot, CPython
raises ``NotShareableError: (Queue(1), <function f>, ({...},), {}) does not support
cross-interpreter data`` (an argument) or ``NotShareableError: object does not support
cross-interpreter data`` (a result): no path, no reason.

``WorkerContext.run`` (in the thread that hands a task to its interpreter) is wrapped:
- It sends the call as ``call_and_pack(fn, args, kwargs)``, a module-level function here that
  runs in the worker interpreter, calls ``fn``, and returns the result pickled (bytes, which
  are shared as they are; a result that is not natively shareable was pickled anyway). A result
  that cannot be pickled raises there, with mpcompat's note naming its path (``result[...]``),
  and reaches the caller as the task's exception. The wrapper unpickles the bytes it gets back.
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


def call_and_pack(fn, args, kwargs):
    """In a worker interpreter: ``fn(*args, **kwargs)``, returned pickled. A result that
    cannot be pickled raises its pickling error with mpcompat's note. (Pickles of tasks name
    this function: it stays at this path.)"""
    result = fn(*args, **kwargs)
    try:
        return pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
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
        return pickle.loads(packed)
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
