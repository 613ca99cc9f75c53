"""An earlier run, which a test kills (``leftover_runs.leave``): it forks a worker that holds
what the next run needs, then waits. The worker prints ``PID PORT`` once it holds it and lives
on as an orphan once the run is killed, as a killed run's DataLoader worker or rank does.

    python earlier_run.py socket         a plain socket listening on a free port
    python earlier_run.py tcpstore       a torch TCPStore master on a free port
    python earlier_run.py file PATH      PATH open (a stand-in for /dev/nvidia0)
"""
import os
import socket
import sys
import time


def hold(mode, path):
    """Hold what ``mode`` says; return ``(what, port)`` (port 0 for a file)."""
    if mode == "file":
        return open(path, "rb"), 0
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does
    server.bind(("0.0.0.0", 0))
    port = server.getsockname()[1]
    if mode == "socket":
        server.listen(8)
        return server, port
    server.close()
    import datetime
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", port, 1, True, datetime.timedelta(seconds=60)), port


if __name__ == "__main__":
    if os.fork() == 0:
        held, port = hold(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
        print(os.getpid(), port, flush=True)
        time.sleep(600)  # the test kills it first; this bounds a test that could not
        os._exit(0)
    time.sleep(600)
