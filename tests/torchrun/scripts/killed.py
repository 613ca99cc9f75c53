"""Two gloo ranks: rank 1 is SIGKILLed while rank 0 waits in a barrier."""
import os
import signal

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
