"""Apply and revert of one patch from several threads at once, as concurrent activate() and
deactivate() calls do (the manager runs them outside activation's lock): no error, nothing
registered twice, and the end state is the last call's. Each race repeats in a fresh process,
with the interpreter switching threads as often as it can; a run is bounded by a timeout."""
import pytest

from testenv import run_race


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


@pytest.mark.parametrize("patch", ["torch_elastic_errors", "mp_bootstrap_notes"])
def test_chained_excepthook_installed_and_removed_by_threads_at_once(patch):
    run_race("""
from mpcompat.patches import %s as patch
original = sys.excepthook
make = lambda previous: type("Hook", (), {"active": True, "previous": previous, "pid": 0})()
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
