"""Two gloo ranks: rank 1 moves itself into the memory cgroup whose cgroup.procs file is the
first argument, then allocates until the kernel's OOM killer kills it; rank 0 waits in a
barrier."""
import os
import sys

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        with open(sys.argv[1], "w") as procs:
            procs.write(str(os.getpid()))
        hoard = []
        while True:
            hoard.append(bytearray(10 << 20))
    dist.barrier()
