"""MPCOMPAT_HANG_DUMP with torch: a DataLoader whose ``__getitem__`` blocks (fork and spawn
workers) and a ``torch.multiprocessing.spawn`` child that blocks dump the stacks of the waiting
process and of the workers; a loader whose batches keep coming never dumps; unset, the patch is
"not needed"; deactivated, the originals are back (torch 2.13 on .venv, 1.9.1 on .venv38).

The scenarios run side by side (module fixture), each a real script in its own session,
released through stdin once its dumps are there.
"""
import json
import subprocess
import sys
import textwrap
import time

import pytest

import hang_dump_helpers as h
from testenv import child_env

WAITS = "# <-- waits"
STUCK = "# <-- stuck"
MARK = "--- the stuck wait starts ---"

LOADER = textwrap.dedent('''
    import sys
    import torch
    from torch.utils.data import DataLoader, Dataset
    from hang_dump_helpers import release_on_stdin


    class Gated(Dataset):
        """Item 1 waits for the gate; the others come at once."""

        def __init__(self, gate):
            self.gate = gate

        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 1:
                self.gate.wait()  # <-- stuck
            return torch.tensor([i])


    if __name__ == "__main__":
        ctx = torch.multiprocessing.get_context(sys.argv[1])
        gate = ctx.Event()
        loader = DataLoader(Gated(gate), batch_size=1, num_workers=2,
                            multiprocessing_context=ctx)
        batches = iter(loader)
        first = next(batches)  # the workers have started (spawn ones take a while)
        sys.stderr.write("--- the stuck wait starts ---\\n")
        sys.stderr.flush()
        release_on_stdin(gate.set)
        rest = [b for b in batches]  # <-- waits
        print([int(b) for b in [first] + rest])
''')

SPAWN = textwrap.dedent('''
    import sys
    from hang_dump_helpers import release_on_stdin


    def run(rank, gate):
        if rank == 1:
            gate.wait()  # <-- stuck


    if __name__ == "__main__":
        import torch.multiprocessing as tmp
        gate = tmp.get_context("spawn").Event()
        release_on_stdin(gate.set)
        tmp.spawn(run, args=(gate,), nprocs=2)  # <-- waits
        print("joined")
''')

PROGRESS = textwrap.dedent('''
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Slow(Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            time.sleep(0.2)
            return torch.tensor([i])


    if __name__ == "__main__":
        # 2 workers: 1.2 s in all, a batch every 0.1 to 0.2 s
        loader = DataLoader(Slow(), batch_size=1, num_workers=2,
                            multiprocessing_context="fork")
        print(sum(int(b) for b in loader))
''')

STATUS = textwrap.dedent('''
    import importlib
    import json
    import os
    import mpcompat
    from mpcompat import patching

    spawn = importlib.import_module("torch.multiprocessing.spawn")
    dataloader = importlib.import_module("torch.utils.data.dataloader")
    NAME = "torch.hang_dump"


    def methods():
        return {"_get_data": dataloader._MultiProcessingDataLoaderIter.__dict__["_get_data"],
                "join": spawn.ProcessContext.__dict__["join"]}


    def report():
        state = [[p.state, p.reason] for p in mpcompat.status().patches if p.name == NAME][0]
        return {"state": state,
                "plain": sorted(k for k, f in methods().items()
                                if type(f).__name__ == "function"
                                and not hasattr(f, "__wrapped__"))}


    out = {"unset": report()}
    originals = methods()
    os.environ["MPCOMPAT_HANG_DUMP"] = "1"  # read when the patch applies: re-activate
    mpcompat.deactivate()
    mpcompat.activate()
    patching.apply_deferred()  # what a DataLoader's iter() or spawn() would do first
    out["on"] = report()
    out["wrapped"] = sorted(k for k, f in methods().items()
                            if getattr(f, "__wrapped__", None) is originals[k])
    mpcompat.deactivate()
    out["off"] = report()
    out["restored"] = sorted(k for k, f in methods().items() if f is originals[k])
    mpcompat.activate()
    patching.apply_deferred()
    out["again"] = report()
    print(json.dumps(out))
''')

# name -> (script, args, MPCOMPAT_HANG_DUMP or None)
SCENARIOS = {
    "loader-fork": (LOADER, ("fork",), "1"),
    "loader-spawn": (LOADER, ("spawn",), "1"),
    "loader-fork-before": (LOADER, ("fork",), None),
    "spawn-join": (SPAWN, (), "1"),
}


def after_mark(err):
    """The stderr written once the scenario's stuck wait started (all of it for spawn-join)."""
    return err[err.index(MARK):] if MARK in err else ""


def ready_for(path, name, label):
    """Release once two complete dumps of the stuck wait are there, which have shown the stuck
    worker's stack on its line."""
    stuck = h.line_of(path, STUCK)
    part = (lambda err: err) if name == "spawn-join" else after_mark

    def ready(err):
        complete = stuck_dumps(part(err), name)
        return len(complete) >= 2 and any(h.stuck_workers(d[4], label, path, stuck)
                                          for d in complete)
    return ready


def stuck_dumps(text, name):
    """The complete dumps of the stuck wait: after the mark, of batch 1 (a dump of the first
    batch's wait may end after the mark); for spawn-join, once rank 0 has exited (its exit
    ended the first join call: progress)."""
    done = h.complete_dumps(text)
    found = [d for d in h.dumps(text) if d[0] in done]
    if name == "spawn-join":
        found = [d for d in found if "1 of 2 still running" in d[3]]
    else:
        found = [d for d in found if "(batch 1 of 4;" in d[3]]
    return found


def _stuck_for(seconds):
    """Release once the stuck wait has lasted ``seconds`` (dumps would have come by then)."""
    seen = []

    def ready(err):
        if MARK in err and not seen:
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= seconds
    return ready


LABELS = {"loader-fork": "DataLoader worker 1", "loader-spawn": "DataLoader worker 1",
          "spawn-join": "spawn process 1"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run the scenarios side by side; {name: (met, rc, stdout, stderr, script)}."""
    def release(name, scenario, path):
        if SCENARIOS[name][2] is None:
            return scenario.release_when(_stuck_for(2.5), limit=60)
        return scenario.release_when(ready_for(path, name, LABELS[name]), limit=90)

    return h.run_side_by_side(tmp_path_factory.mktemp("stuck_torch"), SCENARIOS, release)


def check(result, name, text, what, label):
    """The common checks; return the complete dumps of the stuck wait."""
    met, rc, out, err, path = result
    assert met, err
    assert rc == 0, err  # released, it went on: nothing was killed
    dumps = stuck_dumps(text, name)
    assert len(dumps) >= 2, err
    waits, stuck = h.line_of(path, WAITS), h.line_of(path, STUCK)
    for i, (number, pid, waited, described, section) in enumerate(dumps):
        assert what in described, described
        since = h.SINCE.search(section)
        assert since and since.group(1) == "1", section[:600]
        assert "mpcompat/" not in section, section  # no frame of mpcompat's
        if i == 0 or not h.repeat_says_what_changed(section, number):
            stack = h.waiting_stack(section)
            assert 'File "%s", line %d, in ' % (path, waits) in stack and WAITS in stack, stack
    # backoff: the wait's dumps come after 1, 2 (4, ...) seconds without progress
    assert h.backoff_holds(dumps) and dumps[0][2] >= 0.95, [d[:3] for d in dumps]
    assert [d[2] >= 2 ** i - 0.05 for i, d in enumerate(dumps)] == [True] * len(dumps)
    shown = [d[4] for d in dumps if h.stuck_workers(d[4], label, path, stuck)]
    assert shown, err
    # the stuck worker first, named in the header; the whole dump in a screenful
    assert "; stuck in %s, line %d, in " % (path, stuck) in shown[0].splitlines()[0], shown[0]
    assert shown[0].index(STUCK) < shown[0].index("(the waiting thread)"), shown[0]
    assert len(shown[0].splitlines()) <= 40, shown[0]
    return dumps


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_blocked_getitem_dumps_the_loader_and_its_workers(runs, method):
    met, rc, out, err, path = runs["loader-" + method]
    dumps = check(runs["loader-" + method], "loader", after_mark(err),
                  "a batch from a DataLoader (batch ", "DataLoader worker 1")
    assert out.strip() == "[0, 1, 2, 3]"
    assert "of 4; 2 worker processes; dataset Gated)" in dumps[-1][3]
    stuck = h.line_of(path, STUCK)
    assert "line %d, in __getitem__" % stuck in dumps[-1][4].splitlines()[0]
    # the idle worker: one line
    assert any("(DataLoader worker 0): idle, in " in d[4] for d in dumps), err


def test_a_blocked_spawn_child_dumps_the_join_and_the_child(runs):
    met, rc, out, err, path = runs["spawn-join"]
    dumps = check(runs["spawn-join"], "spawn-join", err,
                  "torch.multiprocessing.spawn's processes to exit (ProcessContext.join: ",
                  "spawn process 1")
    assert out.strip() == "joined"
    assert "1 of 2 still running)" in dumps[-1][3]  # rank 0 exited: that was progress
    assert "(spawn process 0)" not in dumps[-1][4]  # exited processes are not asked
    stuck = h.line_of(path, STUCK)
    # The dumps whose stuck worker answered in time (under load a later one may come while it
    # is being released): their header names it.
    shown = [d[4] for d in dumps if h.stuck_workers(d[4], "spawn process 1", path, stuck)]
    assert shown and "line %d, in run, in worker pid " % stuck in shown[-1].splitlines()[0], \
        shown


def test_before_nothing_is_printed(runs):
    met, rc, out, err, path = runs["loader-fork-before"]
    assert met and rc == 0 and out.strip() == "[0, 1, 2, 3]", err
    assert "mpcompat" not in err, err


def test_a_loader_whose_batches_keep_coming_never_dumps(tmp_path):
    path = tmp_path / "progress.py"
    path.write_text(PROGRESS)
    rc, out, err = h.run_to_end(path, "1")
    assert rc == 0 and out.strip() == str(sum(range(12))), err
    assert "hang dump" not in err, err


def test_unset_not_needed_set_applied_and_reverted():
    env = child_env(MPCOMPAT_HANG_DUMP=None, MPCOMPAT_WARNED=None)
    proc = subprocess.run([sys.executable, "-c", STATUS], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["unset"] == {"state": ["not needed", "MPCOMPAT_HANG_DUMP is not set"],
                            "plain": ["_get_data", "join"]}
    applied = {"state": ["applied", "on torch.multiprocessing.spawn, "
                                    "torch.utils.data.dataloader"], "plain": []}
    assert out["on"] == out["again"] == applied
    assert out["wrapped"] == out["restored"] == ["_get_data", "join"]
    assert out["off"]["plain"] == ["_get_data", "join"]
    assert "mpcompat" not in proc.stderr
