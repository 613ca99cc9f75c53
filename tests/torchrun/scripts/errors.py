"""Three gloo ranks that fail, each as mpcompat explains, and report only once all have
failed (so the agent stops none of them early): rank 0 is run by torch's @record, rank 1
without it (its fork DataLoader worker is SIGKILLed), rank 2 after setting an excepthook of its
own that does not chain (set after init_process_group, it displaces torch's and mpcompat's).
Ranks 0 and 2: a spawn DataLoader whose dataset holds a lambda."""
import os
import signal
import sys

import torch.distributed as dist
import torch.utils.data as tud
from torch.distributed.elastic.multiprocessing.errors import record


class Lambdas(tud.Dataset):
    def __init__(self):
        self.fn = lambda x: x

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return i


class Killed(Lambdas):
    def __getitem__(self, i):
        os.kill(os.getpid(), signal.SIGKILL)


def user_hook(etype, value, tb):
    sys.stderr.write("USER HOOK rank %s: %s\n" % (os.environ["RANK"], etype.__name__))


def fail(rank):
    if rank == 1:
        list(tud.DataLoader(Killed(), num_workers=1, multiprocessing_context="fork"))
    list(tud.DataLoader(Lambdas(), num_workers=1, multiprocessing_context="spawn"))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 2:
        sys.excepthook = user_hook
    error = None
    try:
        fail(rank)
    except Exception as exc:
        error = exc
    dist.barrier()
    raise error


if __name__ == "__main__":
    (record(main) if os.environ["RANK"] == "0" else main)()
