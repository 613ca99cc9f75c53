"""Dict views cross process boundaries: Pool, Process + Queue, ProcessPoolExecutor, under
``spawn``, ``forkserver`` and ``fork``, in both directions (parent -> child -> parent).

Spawn and forkserver use the session pools of conftest for Pool; Process and the executor
start one child each per start method.
"""
import concurrent.futures
import multiprocessing
import os
from collections import OrderedDict

import pytest

import mpcompat
import workers
from workers import VIEW_KINDS, canon, make_view

PAIRS = [("car", 50), ("truck", [40, "\u00fc"]), ((1, 2), None), (3 ** 70, {"n": b"\x00"})]


def payload():
    """Every view type, alone and nested, and views of a dict whose values are views."""
    inner = {"x": 1, "y": [2]}
    outer = OrderedDict([("k", inner.keys()), ("v", inner.values()), ("i", inner.items())])
    views = [make_view(kind, PAIRS) for kind in VIEW_KINDS]
    return {"views": views, "by_kind": dict(zip(VIEW_KINDS, views)),
            "outer_values": outer.values(), "outer_items": outer.items()}


def test_active_in_this_process():
    assert mpcompat.is_active()


def check_pool(pool):
    obj = payload()
    seen, back = pool.apply(workers.roundtrip_in_child, (obj,))
    assert seen == canon(obj)
    assert canon(back) == canon(obj)
    # results made in the child, one task per view type, spread over the pool's processes
    specs = [(kind, PAIRS) for kind in VIEW_KINDS]
    made = pool.map(workers.views_from_child, [[spec] for spec in specs], chunksize=1)
    for (kind, _), [view] in zip(specs, made):
        assert type(view).__name__ == kind
        assert canon(view) == canon(make_view(kind, PAIRS))
    pids = {pid for pid, _ in pool.map(workers.canon_in_child, [obj["views"]] * 4, chunksize=1)}
    assert os.getpid() not in pids


def check_process_and_queue(ctx):
    obj = payload()
    queue = ctx.Queue()
    proc = ctx.Process(target=workers.put_roundtrip, args=(queue, obj))
    proc.start()
    try:
        pid, seen, back = queue.get(timeout=30)
    finally:
        proc.join(30)
    assert proc.exitcode == 0
    assert pid == proc.pid and pid != os.getpid()
    assert seen == canon(obj)
    assert canon(back) == canon(obj)


def check_executor(ctx):
    obj = payload()
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as executor:
        seen, back = executor.submit(workers.roundtrip_in_child, obj).result(timeout=30)
        made = list(executor.map(workers.views_from_child, [[(k, PAIRS)] for k in VIEW_KINDS]))
    assert seen == canon(obj)
    assert canon(back) == canon(obj)
    assert [type(v).__name__ for [v] in made] == list(VIEW_KINDS)


def test_spawn_pool(spawn_pool):
    check_pool(spawn_pool)


def test_forkserver_pool(forkserver_pool):
    check_pool(forkserver_pool)


def test_fork_pool():
    with multiprocessing.get_context("fork").Pool(2) as pool:
        check_pool(pool)


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_process_and_queue(method):
    check_process_and_queue(multiprocessing.get_context(method))


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_process_pool_executor(method):
    check_executor(multiprocessing.get_context(method))


def test_children_have_mpcompat_active(spawn_pool, forkserver_pool):
    """A child that unpickled a view imported mpcompat by name, which activated it."""
    view = make_view("dict_keys", PAIRS)
    for pool in (spawn_pool, forkserver_pool):
        assert pool.apply(workers.describe_and_state, (view,)) == (
            ("dict_keys", list(view)), True)
