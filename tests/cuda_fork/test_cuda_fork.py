"""Patch ``torch.cuda_fork`` (issue 36): "Cannot re-initialize CUDA in forked subprocess" says
where the parent started CUDA, where the child touched it, where the child was forked, and the
fix, once, where the user reads the error.

There is no GPU here: ``fake_cuda`` (imported by each script before torch) makes the start go
through ``torch._C._cuda_init`` as on a GPU machine, and marks every child forked after it as
torch's own C++ does. Each scenario is one script, run as an installed mpcompat runs it, whose
whole output is what the user reads. Run with ``MPCOMPAT_DISABLED_PATCHES=torch.cuda_fork`` (passed
on to the scripts), the five scenarios fail: torch's error comes alone.
"""
import os
import sys

import pytest

from one_report_helpers import STARTUP, own_lines, run_user_script
from testenv import REPO, TESTS

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
PATCH = "torch.cuda_fork"
TORCH_ERROR = ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
               "multiprocessing, you must use the 'spawn' start method")
CAUSE = "mpcompat: CUDA had started in the parent process before it forked this %s; a forked " \
        "child cannot use CUDA."

GETITEM = '''\
import fake_cuda
import torch
from torch.utils.data import DataLoader, Dataset


class OnGpu(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.ones(2, device="cuda")


if __name__ == "__main__":
    torch.cuda.init()
    loader = DataLoader(OnGpu(), batch_size=2, num_workers=1, multiprocessing_context="fork")
    for batch in loader:
        print(batch)
'''

INIT_FN = '''\
import fake_cuda
import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([i])


def pick_gpu(worker_id):
    torch.cuda.set_device(torch.cuda.current_device())


if __name__ == "__main__":
    device = torch.cuda.current_device()
    loader = DataLoader(Numbers(), batch_size=2, num_workers=1, worker_init_fn=pick_gpu,
                        multiprocessing_context="fork")
    for batch in loader:
        print(batch)
'''

POOL = '''\
import fake_cuda
import multiprocessing
import torch


def scale(x):
    return torch.full((2,), x, device="cuda")


if __name__ == "__main__":
    torch.cuda.init()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(pool.map(scale, [1, 2, 3]))
'''

PROCESS = '''\
import fake_cuda
import multiprocessing
import torch


def train(rank):
    torch.zeros(1, device="cuda")


if __name__ == "__main__":
    torch.cuda.init()
    child = multiprocessing.get_context("fork").Process(target=train, args=(0,))
    child.start()
    child.join()
    print("exit code", child.exitcode)
'''

# A start hidden in a library (fakelib, under a site-packages directory), and an executor.
LIBRARY = '''\
import fake_cuda
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import fakelib
import torch


def embed(x):
    return torch.ones(x, device="cuda").sum().item()


if __name__ == "__main__":
    fakelib.setup(0)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as executor:
        print(executor.submit(embed, 3).result())
'''

FAKELIB = '''\
import torch


def setup(seed):
    torch.manual_seed(seed)
    return torch.cuda.current_device()


def warm_up():
    torch.cuda.init()
'''

# A start in a thread of a library, where no line of the user's is on the stack (torch's
# DataLoader pin_memory thread is one such).
THREAD = '''\
import fake_cuda
import multiprocessing
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import fakelib
import torch


def train():
    torch.cuda.current_device()


if __name__ == "__main__":
    warm = threading.Thread(target=fakelib.warm_up, name="pt_data_pin")
    warm.start()
    warm.join()
    child = multiprocessing.get_context("fork").Process(target=train)
    child.start()
    child.join()
'''

# Nothing goes wrong: fork children forked before and after the start that leave CUDA alone, a
# spawn child; the observer is in place before the start and gone after it.
QUIET = '''\
import fake_cuda
import multiprocessing
import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([i])


def square(x):
    return x * x


if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    early = fork.Pool(1)
    # not started yet: the patch waits for the first _lazy_init (its stub), or observes
    assert getattr(torch.cuda._lazy_init, "mpcompat_first_use", False) or \
        torch._C._cuda_init is not fake_cuda._cuda_init
    torch.cuda.init()
    assert torch._C._cuda_init is fake_cuda._cuda_init  # torch's own back: nothing after
    torch.cuda.init()
    print(early.map(square, [1, 2]))
    early.close()
    early.join()
    with fork.Pool(2) as pool:
        print(pool.map(square, [1, 2, 3]))
    loader = DataLoader(Numbers(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    print([batch.tolist() for batch in loader])
    child = fork.Process(target=square, args=(3,))
    child.start()
    child.join()
    print("exit code", child.exitcode)
'''


def run(tmp_path, source, **env):
    """Run ``source`` as ``script.py``; return ``(returncode, lines, script path)``."""
    lib = tmp_path / "site-packages" / "fakelib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(FAKELIB)
    env.setdefault("MPCOMPAT_DISABLED_PATCHES", os.environ.get("MPCOMPAT_DISABLED_PATCHES"))
    env["PYTHONPATH"] = os.pathsep.join([REPO, TESTS, STARTUP, HERE])
    code, lines = run_user_script(tmp_path, source, timeout=180, **env)
    return code, lines, str(tmp_path / "script.py")


def check_one_report(code, lines, expected_code, what, needles):
    """The output holds torch's error once, the note once with ``needles`` each once, and no
    frame of mpcompat."""
    text = "\n".join(lines)
    assert code == expected_code, text
    assert text.count(TORCH_ERROR) == 1 or (text.count(TORCH_ERROR) == 2 and "\"\"\"" in text), \
        text  # a Pool's and an executor's: the worker's traceback (quoted), then the error
    assert text.count("mpcompat:") == 1 and text.count(CAUSE % what) == 1, text
    for needle in needles:
        assert text.count(needle) == 1, (needle, text)
    assert own_lines(lines) == [], text
    return text


def test_dataloader_getitem(tmp_path):
    code, lines, script = run(tmp_path, GETITEM)
    text = check_one_report(code, lines, 1, "DataLoader worker process", [
        "  the parent (pid ",
        "started CUDA: %s, line 15: torch.cuda.init()" % script,
        "  this worker touched CUDA: %s, line 11, in __getitem__: return torch.ones(2, "
        'device="cuda")' % script,
        "  it was forked by: %s, line 17: for batch in loader:  (the DataLoader's iterator "
        "starts its workers)" % script,
        'Fix: add multiprocessing_context="spawn" (or "forkserver") to that DataLoader(...)',
        "Or keep CUDA out of __getitem__(): work on CPU tensors in the workers and move each "
        "batch to the GPU in the main process, after it arrives: "
        "batch = batch.cuda(non_blocking=True).",
    ])
    # the note ends the worker's traceback the main process raises
    assert text.index("Caught RuntimeError in DataLoader worker process 0") < text.index(
        TORCH_ERROR) < text.index(CAUSE % "DataLoader worker process"), text


def test_dataloader_worker_init_fn(tmp_path):
    code, lines, script = run(tmp_path, INIT_FN)
    check_one_report(code, lines, 1, "DataLoader worker process", [
        "started CUDA: %s, line 19: device = torch.cuda.current_device()" % script,
        "  this worker touched CUDA in its worker_init_fn: %s, line 15, in pick_gpu: "
        "torch.cuda.set_device(torch.cuda.current_device())" % script,
        "  it was forked by: %s, line 22: for batch in loader:" % script,
        'Fix: add multiprocessing_context="spawn"',
        "Or keep torch.cuda out of worker_init_fn (pick_gpu()): the workers need no CUDA",
    ])


def test_pool_task(tmp_path):
    code, lines, script = run(tmp_path, POOL)
    text = check_one_report(code, lines, 1, "Pool worker process", [
        "started CUDA: %s, line 11: torch.cuda.init()" % script,
        "  this worker touched CUDA: %s, line 7, in scale: return torch.full((2,), x, "
        'device="cuda")' % script,
        '  it was forked by: %s, line 12: with multiprocessing.get_context("fork").Pool(2) as '
        "pool:  (the Pool starts its workers)" % script,
        "Fix: make the Pool before CUDA starts (before script.py, line 11)",
        'Or start its workers with spawn: multiprocessing.get_context("spawn").Pool(...)',
    ])
    # said once, at the end: not in the worker's traceback shown above the error
    assert text.rindex(TORCH_ERROR) < text.index(CAUSE % "Pool worker process"), text
    assert lines[-1].startswith("Fix: "), text


def test_process_target(tmp_path):
    code, lines, script = run(tmp_path, PROCESS)
    text = check_one_report(code, lines, 0, "child process", [
        "started CUDA: %s, line 11: torch.cuda.init()" % script,
        '  this child touched CUDA: %s, line 7, in train: torch.zeros(1, device="cuda")'
        % script,
        "  it was forked by: %s, line 13: child.start()  (Process.start)" % script,
        'Fix: start it with spawn: multiprocessing.get_context("spawn").Process(...) (or '
        '"forkserver"), or start it before CUDA starts (before script.py, line 11).',
    ])
    assert lines[-1] == "exit code 1", text  # the child's traceback is what the user reads


def test_library_hidden_start_and_executor(tmp_path):
    code, lines, script = run(tmp_path, LIBRARY)
    text = check_one_report(code, lines, 1, "ProcessPoolExecutor worker process", [
        "started CUDA: %s, line 17: fakelib.setup(0)\n" % script,
        "      inside that call, at %s, line 6, in setup: return torch.cuda.current_device()"
        % os.path.join(str(tmp_path), "site-packages", "fakelib", "__init__.py"),
        "  this worker touched CUDA: %s, line 13, in embed: return torch.ones(x, "
        'device="cuda").sum().item()' % script,
        "  it was forked by: %s, line 19: print(executor.submit(embed, 3).result())" % script,
        'Fix: ProcessPoolExecutor(..., mp_context=multiprocessing.get_context("spawn"))',
    ])
    assert text.rindex(TORCH_ERROR) < text.index(CAUSE % "ProcessPoolExecutor worker "
                                                          "process"), text


def test_start_in_a_thread_of_a_library(tmp_path):
    code, lines, script = run(tmp_path, THREAD)
    check_one_report(code, lines, 0, "child process", [
        "started CUDA in its thread 'pt_data_pin', at %s, line 10, in warm_up: "
        "torch.cuda.init() (no line of yours on that thread's stack)"
        % os.path.join(str(tmp_path), "site-packages", "fakelib", "__init__.py"),
        "  this child touched CUDA: %s, line 13, in train: torch.cuda.current_device()"
        % script,
        "  it was forked by: %s, line 21: child.start()" % script,
    ])


def test_nothing_said_when_nothing_goes_wrong(tmp_path):
    code, lines, _ = run(tmp_path, QUIET)
    assert code == 0 and lines == ["[1, 4]", "[1, 4, 9]", "[[[0], [1]], [[2], [3]]]",
                         "exit code 0"], \
        "\n".join(lines)


def test_without_the_patch_torch_error_comes_alone(tmp_path):
    code, lines, _ = run(tmp_path, GETITEM, MPCOMPAT_DISABLED_PATCHES=PATCH)
    text = "\n".join(lines)
    assert code == 1 and text.count(TORCH_ERROR) == 1 and "mpcompat" not in text, text
