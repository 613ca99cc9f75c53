"""A torchrun script that never imports mpcompat: two gloo ranks exchange dict views and
F.max_pool2d with all_gather_object and broadcast_object_list. Rank 0 prints a JSON report.

Each payload goes through all_gather_object first: every rank pickles the same kind of object
before any collective starts, so a payload that cannot be pickled fails on every rank alike and
the ranks never wait for each other. broadcast_object_list (only rank 0 pickles) follows only
for a payload that all_gather_object carried.
"""
import json
import sys

import torch.distributed as dist
import torch.nn.functional as F


def views(rank):
    """A config-like object holding the three dict views of a per-rank dict."""
    d = {"rank": rank, "car": 50}
    return {"keys": d.keys(), "values": d.values(), "items": d.items()}


def describe(obj):
    """JSON-able description of a payload as received."""
    if isinstance(obj, dict):
        return {k: [type(v).__name__, sorted(map(str, v))] for k, v in obj.items()}
    return "%s.%s is F.max_pool2d: %s" % (obj.__module__, obj.__name__, obj is F.max_pool2d)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mod = sys.modules.get("mpcompat")
    report = {"world_size": dist.get_world_size(),
              "mpcompat_active": bool(mod is not None and mod.is_active()),
              "mpcompat_file": getattr(mod, "__file__", None)}
    for name, payload in (("views", views(rank)), ("max_pool2d", F.max_pool2d)):
        gathered = [None] * dist.get_world_size()
        try:
            dist.all_gather_object(gathered, payload)
        except Exception as exc:
            report[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}
            continue
        box = [payload if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        report[name] = {"all_gather_object": [describe(g) for g in gathered],
                        "broadcast_object_list": describe(box[0])}
    all_reports = [None] * dist.get_world_size()
    dist.all_gather_object(all_reports, {"rank": rank, "active": report["mpcompat_active"]})
    report["ranks"] = all_reports
    if rank == 0:
        print(json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
