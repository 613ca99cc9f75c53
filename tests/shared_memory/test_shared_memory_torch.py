"""A DataLoader whose batches (8 MiB) do not fit in /dev/shm (a 2 MiB tmpfs mounted on it in a
mount namespace of its own, ``unshare -m``): from torch 2.10 (which reserves each segment with
posix_fallocate) the worker fails with "unable to allocate shared memory ... No space left on
device"; before that (1.9.1, 2.6.0) it dies of SIGBUS as it writes the batch, or, where the other
worker's segment has filled /dev/shm first, fails with "unable to write to file </torch_...>"
(seen under load in CI, torch 2.6). Either way the error names what was measured: /dev/shm's size and use, the loader's num_workers x prefetch_factor,
the batch's size where it can be read, and the fix with numbers
(``mpcompat.child_failures.exits.shm_lines``). Needs root (a mount namespace); each scenario runs
in a fresh child bounded by a timeout."""
import os
import re
import shutil
import subprocess

import pytest
import torch

from pool_workers_helpers import flat, run_script

# torch 2.10.0's libtorch_cpu has "unable to allocate shared memory(shm)"; 2.9.0's has not.
ENOSPC = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 10)
# A private copy of /dev/shm's mount in a new mount namespace, then a 2 MiB tmpfs over it: the
# host's /dev/shm is never touched. (--propagation unchanged: in a chroot "/" is no mount
# point to make private.)
UNSHARE = ["unshare", "-m", "--propagation", "unchanged", "sh", "-c",
           'mount --make-private /dev/shm && mount -t tmpfs -o size=2m tmpfs /dev/shm && '
           'exec "$0" "$@"']

SCENARIO = '''\
import os, sys
if sys.argv[1] == "outer":  # again, in a mount namespace whose /dev/shm holds 2 MiB
    os.execvp("unshare", %r + [sys.executable, __file__, "inner"] + sys.argv[2:])
import multiprocessing, re, traceback
import torch
import mpcompat
from crash_helpers import EightMiB, EightMiBOnAFullShm
from pool_workers_helpers import report

if __name__ == "__main__":
    method = None if sys.argv[2] == "default" else sys.argv[2]
    dataset = EightMiBOnAFullShm() if sys.argv[3:] == ["full"] else EightMiB()
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, num_workers=2,
                                         multiprocessing_context=method)
    try:
        list(loader)
        report({"error": "no error"})
    except RuntimeError as exc:
        from mpcompat.child_failures import exits
        pid = re.search(r"pid\\(?s?\\)? (\\d+)", str(exc))
        report({"error": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                "method": method or multiprocessing.get_start_method(),
                "stack": exits.crash_lines(int(pid.group(1))) if pid else []})
''' % (UNSHARE,)


def _can_unshare():
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(UNSHARE + ["true"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=30).returncode == 0


pytestmark = pytest.mark.skipif(not _can_unshare(),
                                reason="needs root and unshare -m (a mount namespace)")


@pytest.mark.parametrize("method", ["default", "fork", "spawn"])
def test_full_shared_memory_is_measured(tmp_path, method):
    _check_measured(*run_script(tmp_path, SCENARIO, "outer", method, timeout=240))


def test_shared_memory_full_before_the_batch_is_measured(tmp_path):
    """A worker whose batch finds /dev/shm full already: torch before 2.10 says "unable to write
    to file </torch_...>" (CI saw it under load, the other worker's segment having filled
    /dev/shm), 2.10+ "unable to allocate shared memory"."""
    text = _check_measured(*run_script(tmp_path, SCENARIO, "outer", "spawn", "full", timeout=240))
    assert re.search(r"unable to (write to file </torch_|allocate shared memory)", text), text


def _check_measured(data, proc):
    assert data is not None, proc.stderr
    text = flat(data["error"])
    assert "/dev/shm: 2.0 MiB in all" in text, text
    assert "(num_workers=2 x prefetch_factor=2)" in text, text
    assert "`docker run --ipc=host`" in text, text
    assert "set_sharing_strategy('file_system') does not help" in text, text
    if ENOSPC or "unable to write to file </torch_" in text:  # torch raised in the worker:
        # the allocation it asked for is read there
        assert "The shared-memory allocation that failed asked for 8.0 MiB" in text, text
        # (4 batches ahead + the one in use) x 8 MiB, plus a quarter.
        assert "a /dev/shm of at least 50 MiB: `docker run --shm-size=50m`" in text, text
    else:  # the worker dies of SIGBUS writing the batch: its size is not known
        assert "killed by signal 7 (SIGBUS)" in text, text
        assert "--shm-size" in text, text
        # Its stack, though /dev/shm was full: the room for it was reserved as it started.
        shown = text + " " + flat(" ".join(data["stack"]))
        # torch.stack runs in default_collate (torch 1.9), in collate_tensor_fn (2.x)
        crashed = r"It crashed in (default_collate|collate_tensor_fn)\(\) at "
        assert re.search(crashed, shown), shown
        assert "`return torch.stack(batch, 0, out=out)`" in shown, shown
    return text
