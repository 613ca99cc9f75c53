"""Every rank runs all_reduce twice; before the second, the last rank sleeps argv[1] seconds
(it is not in all_reduce #2 while the others wait in it). Exits 0."""
import sys
import time

import torch
import torch.distributed as dist


def run(pause):
    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    if dist.get_rank() == dist.get_world_size() - 1:
        time.sleep(pause)
    dist.all_reduce(tensor)
    print("RESULT rank %d: %s" % (dist.get_rank(), tensor.item()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    run(float(sys.argv[1]))
