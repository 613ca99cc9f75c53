"""Apply and revert of one patch from several threads at once, as concurrent activate() and
deactivate() calls do (the manager runs them outside activation's lock): no error, nothing
registered twice, and the end state is the last call's. Each race repeats in a fresh process,
with the interpreter switching threads as often as it can; a run is bounded by a timeout."""
import pytest

from testenv import run_python, run_race


def test_opencv_patch_applied_and_reverted_by_threads_at_once():
    run_race("""
import cv2
from mpcompat.patches import opencv_worker_threads as patch
from mpcompat.workers import started
for rep in range(15):
    each([lambda i: (patch.apply(cv2), patch.revert(cv2))] * 6)
    assert patch.configure_worker not in started._callbacks
    each([lambda i: patch.apply(cv2)] * 6)
    assert list(started._callbacks) == [patch.configure_worker]
    patch.revert(cv2)
print("ok")
""")


@pytest.mark.parametrize("patch", ["torch_elastic_errors", "mp_children"])
def test_chained_excepthook_installed_and_removed_by_threads_at_once(patch):
    run_race("""
import types
from mpcompat.patches import %s as patch
original = sys.excepthook
make = lambda previous: types.SimpleNamespace(active=True, previous=previous)
for rep in range(15):
    each([lambda i: (patch.hooks.install(make), patch.hooks.remove())] * 6)
    assert sys.excepthook is original and not patch.hooks.active()
    each([lambda i: patch.hooks.install(make)] * 6)
    assert sum(h.active for h in patch.hooks.installed) == 1
    assert sys.excepthook is patch.hooks.installed[-1]
    assert sys.excepthook.active and sys.excepthook.previous is original
    patch.hooks.remove()
    assert sys.excepthook is original
print("ok")
""" % patch)


def test_hang_dump_handler_armed_and_disarmed_by_threads_at_once():
    # Each thread arms its own owner, then disarms it; "stay" arms once and never disarms:
    # the handler must be registered at the end, and its memory file open.
    run_race("""
import os
from mpcompat.hang_dump import watchdog
state = watchdog._state
for rep in range(15):
    steps = [lambda i, n=n: (watchdog.arm_workers(n), watchdog.disarm_workers(n))
             for n in "abcde"]
    each(steps + [lambda i: i == 150 and watchdog.arm_workers("stay")])
    assert state.armed_by == {"stay"} and state.handler, (state.armed_by, state.handler)
    os.fstat(state.stacks_fd)
    watchdog.disarm_workers("stay")
    assert not state.handler and state.stacks_fd is None
print("ok")
""")


def test_a_forked_child_never_waits_for_a_lock_a_parent_thread_held():
    # A thread holds every lock of activation, the reducer registry, a Patcher and ExceptHooks
    # as the main thread forks; the child then activates, registers a reducer, applies and
    # reverts: with the parent's locks it would wait forever (the child is bounded to 20 s).
    # copyreg first: Python 3.15 imports it only as os.fork() formats its warning on threads,
    # and mpcompat registers its reducers then, under the registry lock this thread holds.
    result = run_python("""
import copyreg, os, sys, threading, time, types, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads (3.12+)
import mpcompat
from mpcompat import activation
from mpcompat import reducers
from mpcompat.activation import process_lock
from mpcompat.patcher import ExceptHooks, Patcher
patcher, hooks = Patcher(), ExceptHooks()
held, done = threading.Event(), threading.Event()
def hold():
    with process_lock(activation._locks), reducers._lock(), \
            process_lock(patcher._locks), process_lock(hooks._locks):
        held.set()
        done.wait()
threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    mpcompat.deactivate(); mpcompat.activate()
    class Mine(object):
        pass
    mpcompat.register(Mine, lambda obj: (Mine, ()))
    module = types.ModuleType("m"); module.f = 1
    patcher.replace(module, "f", 2); patcher.restore(module)
    hooks.install(lambda previous: types.SimpleNamespace(active=True, previous=previous))
    hooks.remove()
    os._exit(0 if module.f == 1 else 1)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    finished, status = os.waitpid(pid, os.WNOHANG)
    if finished:
        print("child exit", os.WEXITSTATUS(status))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9); os.waitpid(pid, 0)
    print("child hung")
done.set()
""", timeout=120)
    assert result.stdout.strip() == "child exit 0", result.stdout + result.stderr
