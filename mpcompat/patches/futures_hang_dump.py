"""Patch ``concurrent_futures.hang_dump``: a ``concurrent.futures`` future waited for too long
dumps the stacks of this process and of its worker processes (``MPCOMPAT_HANG_DUMP``; see
``mpcompat.hang_dump.watchdog``).

On ``concurrent.futures._base`` (plain functions), and on the package where it holds the same
functions: ``Future.result`` and ``Future.exception`` (``Executor.map`` too), ``wait`` (each
future that completes is progress) and each step of ``as_completed``: a call that may block is
watched. A future does not know its executor: the workers asked for their stacks are every live
``multiprocessing`` child; ThreadPoolExecutor workers are threads, in the process's own dump.
"""
import functools
import sys

from mpcompat.patcher import Patcher, Skip
from mpcompat.hang_dump import watchdog
from mpcompat.workers.user_frames import drop_own_frames

NAME = "concurrent_futures.hang_dump"
patcher = Patcher()


def _count(fs):
    if not isinstance(fs, (set, frozenset, list, tuple)):
        return None, None
    items = list(fs)
    return len(items), sum(1 for f in items if f.done())


def _describe_wait(args):
    total, done = _count(args[0])
    return "concurrent.futures.wait(return_when=%s) on %s future%s, %s done" % (
        args[1], "?" if total is None else total, "" if total == 1 else "s",
        "?" if done is None else done)


_FUTURE = watchdog.WaitKind(repr, watchdog.children)
_WAIT = watchdog.WaitKind(_describe_wait, watchdog.children, lambda args: _count(args[0])[1])
_NEXT = watchdog.WaitKind(lambda state: "the next future from concurrent.futures.as_completed "
                          "(%d yielded so far)" % state[0], watchdog.children)


def _wrap_wait(original, module):
    @functools.wraps(original)
    def wait(fs, timeout=None, return_when=module.ALL_COMPLETED):
        try:
            if watchdog.short_timeout(timeout):
                return original(fs, timeout, return_when)
            return watchdog.call_watched((fs, return_when), _WAIT, original, fs, timeout,
                                         return_when)
        except BaseException as exc:
            drop_own_frames(exc)
            raise
    return wait


def _wrap_as_completed(original):
    enter, leave = watchdog.enter, watchdog.leave

    @functools.wraps(original)
    def as_completed(fs, timeout=None):
        steps = original(fs, timeout)
        watched = not watchdog.short_timeout(timeout)
        state = [0]
        box = []  # the future on its way out: the frame holds none across the yield
        try:
            while True:
                token = enter(state, _NEXT) if watched else None
                try:
                    box.append(next(steps))
                except StopIteration:
                    return
                finally:
                    leave(token)
                state[0] += 1
                yield box.pop()
        finally:
            steps.close()
    return as_completed


def apply(module):
    """Wrap ``Future.result``/``exception``, ``wait`` and ``as_completed`` of
    ``concurrent.futures._base``. "Not needed" when MPCOMPAT_HANG_DUMP is unset."""
    watchdog.require()
    future = module.__dict__.get("Future")
    if not isinstance(future, type):
        raise Skip("concurrent.futures._base has no Future class")
    for owner, name in ((future, "result"), (future, "exception"), (module, "wait"),
                        (module, "as_completed")):
        if not callable(owner.__dict__.get(name)):
            raise Skip("concurrent.futures._base has no function %s" % name)
    settled = frozenset((module.FINISHED, module.CANCELLED, module.CANCELLED_AND_NOTIFIED))
    watchdog.arm_workers(NAME)
    for name in ("result", "exception"):
        patcher.replace(future, name, watchdog.watched_method(
            patcher.original(future, name), _FUTURE, lambda f: f._state in settled))
    package = sys.modules.get("concurrent.futures")
    for name, factory in (("wait", lambda f: _wrap_wait(f, module)),
                          ("as_completed", _wrap_as_completed)):
        original = patcher.original(module, name)
        ours = patcher.replace(module, name, factory(original))
        if package is not None and package.__dict__.get(name) is original:
            patcher.replace(package, name, ours, target=module.__name__)


def revert(module):
    """Put back the original functions where ours are still in place (also on the
    ``concurrent.futures`` package)."""
    watchdog.disarm_workers(NAME)
    patcher.restore(module)
