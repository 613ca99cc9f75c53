"""Patch ``concurrent_futures.stuck_waits``: a ``concurrent.futures`` future waited for too long
dumps the stacks of this process and of its worker processes (``MPCOMPAT_HANG_DUMP``).

Off unless ``MPCOMPAT_HANG_DUMP=SECONDS`` is set: futures that take long are common and
legitimate, and a stack dump there would be noise. When unset the patch is "not needed" and
nothing is wrapped. See ``mpcompat.workers.hang_watch`` for the watchdog and the dump.

On ``concurrent.futures._base`` (plain functions, ``functools.wraps``):
- ``Future.result`` and ``Future.exception``: a call on a future that is not done, without a
  timeout or with one of SECONDS or more, is registered with the watchdog (``Executor.map``
  waits through ``result`` too).
- ``wait``: registered likewise; each future that completes is progress.
- ``as_completed``: each step that waits for the next future is registered; each future it
  yields ends that wait.
The same functions are put in place of the originals on the ``concurrent.futures`` package
(``from concurrent.futures import wait``). A future does not know its executor: the workers
asked for their stacks are the live ``multiprocessing`` children of this process (the
ProcessPoolExecutor workers among them); ThreadPoolExecutor workers are threads of this
process and appear in its own dump.
"""
import functools
import sys

from mpcompat.patches import Skip
from mpcompat.patching.patcher import Patcher

NAME = "concurrent_futures.stuck_waits"
patcher = Patcher()


def _workers(obj):
    return sys.modules["mpcompat.workers.hang_watch"].children()


def _describe_future(future):
    return "%r" % (future,)


def _describe_wait(args):
    fs, return_when = args
    total, done = _count(fs)
    return "concurrent.futures.wait(return_when=%s) on %s future%s, %s done" % (
        return_when, "?" if total is None else total, "" if total == 1 else "s",
        "?" if done is None else done)


def _count(fs):
    if not isinstance(fs, (set, frozenset, list, tuple)):
        return None, None
    items = list(fs)
    return len(items), sum(1 for f in items if f.done())


def _wait_progress(args):
    return _count(args[0])[1]


def _describe_next(state):
    return "the next future from concurrent.futures.as_completed (%d yielded so far)" % (
        state[0],)


# What the dump says about each kind of wait (see mpcompat.workers.hang_watch.kind).
_FUTURE = (_describe_future, _workers, None)
_WAIT = (_describe_wait, _workers, _wait_progress)
_NEXT = (_describe_next, _workers, None)


def _wrap_method(original, settled, hang_watch):
    watched, short = hang_watch.call_watched, hang_watch.short

    @functools.wraps(original)
    def method(self, timeout=None):
        try:
            if self._state in settled or (timeout is not None and short(timeout)):
                return original(self, timeout)
            return watched(self, _FUTURE, original, self, timeout)
        finally:
            self = None  # as the original does: no cycle through a raised exception's frames
    return method


def _wrap_wait(original, module, hang_watch):
    watched, short = hang_watch.call_watched, hang_watch.short

    @functools.wraps(original)
    def wait(fs, timeout=None, return_when=module.ALL_COMPLETED):
        if timeout is not None and short(timeout):
            return original(fs, timeout, return_when)
        return watched((fs, return_when), _WAIT, original, fs, timeout, return_when)
    return wait


def _wrap_as_completed(original, hang_watch):
    enter, leave, short = hang_watch.enter, hang_watch.leave, hang_watch.short

    @functools.wraps(original)
    def as_completed(fs, timeout=None):
        steps = original(fs, timeout)
        watched = timeout is None or not short(timeout)
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
    # Only called when MPCOMPAT_HANG_DUMP is set (the manager answers "not needed" otherwise,
    # before this module is even imported); require() checks the value.
    from mpcompat.workers import hang_watch
    hang_watch.require()
    future = module.__dict__.get("Future")
    if not isinstance(future, type):
        raise Skip("concurrent.futures._base has no Future class")
    for owner, name in ((future, "result"), (future, "exception"), (module, "wait"),
                        (module, "as_completed")):
        if not callable(owner.__dict__.get(name)):
            raise Skip("concurrent.futures._base has no function %s" % name)
    settled = frozenset((module.FINISHED, module.CANCELLED, module.CANCELLED_AND_NOTIFIED))
    hang_watch.arm_workers(NAME)
    for name in ("result", "exception"):
        patcher.replace(future, name, _wrap_method(patcher.original(future, name), settled,
                                                   hang_watch))
    package = sys.modules.get("concurrent.futures")
    for name, factory in (("wait", lambda f: _wrap_wait(f, module, hang_watch)),
                          ("as_completed", lambda f: _wrap_as_completed(f, hang_watch))):
        original = patcher.original(module, name)
        ours = patcher.replace(module, name, factory(original))
        if package is not None and package.__dict__.get(name) is original:
            patcher.replace(package, name, ours, target=module.__name__)


def revert(module):
    """Put back the original functions where ours are still in place (also on the
    ``concurrent.futures`` package)."""
    hang_watch = sys.modules.get("mpcompat.workers.hang_watch")
    if hang_watch is not None:
        hang_watch.disarm_workers(NAME)
    patcher.restore(module)
