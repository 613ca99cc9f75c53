"""Two gloo ranks: rank 1 crashes in native code (a segfault) while rank 0 waits in a
barrier."""
import ctypes

import torch.distributed as dist


def decode_frame():
    return ctypes.string_at(0)  # the crash


if __name__ == "__main__":
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        decode_frame()
    dist.barrier()
