"""elastic_launch with a function entrypoint (spawn) whose argument is an instance of a class
defined under the main guard: every rank fails as it starts (it cannot load the argument).
Prints the summary of the ChildFailedError."""
import sys

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch


def train(config):
    return config.lr


if __name__ == "__main__":
    class Config(object):
        lr = 0.1

    launch = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id="launch",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    if hasattr(launch, "local_addr"):  # torch 2: not the host name, which a chroot may not know
        launch.local_addr = "127.0.0.1"
    try:
        elastic_launch(launch, train)(Config())
    except ChildFailedError as exc:
        print("SUMMARY", exc, flush=True)
        sys.exit(1)
