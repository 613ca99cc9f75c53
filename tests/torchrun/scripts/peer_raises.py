"""Four gloo ranks: rank 1 raises while ranks 0 and 2 wait for it in a barrier (they fail of
"Connection closed by peer") and rank 3 sleeps before it (the agent stops it: SIGTERM)."""
import time

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        raise ValueError("rank 1 cannot read its shard")
    if rank == 3:
        time.sleep(60)
    dist.barrier()
