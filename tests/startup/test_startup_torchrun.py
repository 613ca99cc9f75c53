"""torchrun with two gloo ranks: they exchange dict views and F.max_pool2d with
all_gather_object and broadcast_object_list, mpcompat active in every rank through the wheel's
mpcompat.pth, and failing as without mpcompat under MPCOMPAT_DISABLE=1."""
import pytest

TORCHRUN = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


@pytest.fixture(scope="module", params=[False, True], ids=["on", "MPCOMPAT_DISABLE"])
def exchange(request, installed):
    """(disabled, rank 0's report) of one torchrun per setting."""
    disabled = request.param
    env = {"OMP_NUM_THREADS": "1"}
    if disabled:
        env["MPCOMPAT_DISABLE"] = "1"
    report = installed.report("ranks.py", prefix=TORCHRUN, quiet=False, timeout=180, **env)
    return disabled, report


def test_every_rank_has_mpcompat_from_the_wheel(exchange, installed):
    disabled, report = exchange
    assert report["world_size"] == 2
    assert report["ranks"] == [{"rank": 0, "active": not disabled},
                               {"rank": 1, "active": not disabled}]
    if not disabled:
        assert report["mpcompat_file"].startswith(installed.site_packages)


def test_ranks_exchange_dict_views(exchange):
    disabled, report = exchange
    if disabled:
        assert report["views"] == {"error": "TypeError: cannot pickle 'dict_keys' object"}
        return
    def views(rank):
        return {"keys": ["dict_keys", sorted(["rank", "car"])],
                "values": ["dict_values", sorted([str(rank), "50"])],
                "items": ["dict_items", sorted([str(("rank", rank)), str(("car", 50))])]}
    assert report["views"] == {"all_gather_object": [views(0), views(1)],
                               "broadcast_object_list": views(0)}


def test_ranks_exchange_max_pool2d(exchange):
    disabled, report = exchange
    if disabled:
        assert report["max_pool2d"]["error"].startswith(
            "AttributeError: Can't pickle local object 'boolean_dispatch.<locals>.fn'")
        return
    same = "torch.nn.functional.max_pool2d is F.max_pool2d: True"
    assert report["max_pool2d"] == {"all_gather_object": [same, same],
                                    "broadcast_object_list": same}
