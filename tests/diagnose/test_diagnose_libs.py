"""Hints for lmdb and h5py handles, with the real objects, and the lmdb lazy-open pattern the
hint shows working in a real spawn DataLoader; a fork-context lock sent to a spawn process
(refused from Python 3.11 on). Python 3.11 with torch, lmdb, h5py."""
import multiprocessing
import sys

import h5py
import lmdb
import torch.utils.data as data

import diagnose_workers as w
import mpcompat


def test_hint_lmdb_environment(tmp_path):
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 20)
    try:
        for obj, path in ((env, "dataset.env"),):
            report = mpcompat.explain(w.Holder(path=str(tmp_path), env=obj), name="dataset")
            problem = report.problems[0]
            assert [p.path for p in report.problems] == [path]
            assert problem.type is lmdb.Environment
            fix = "self.env = mpcompat.per_process(lmdb.open, path, readonly=True, lock=False)"
            assert fix in problem.hint
            assert problem.hint.index(fix) < problem.hint.index("open it lazily yourself")
            assert "lmdb.open(self.path, readonly=True, lock=False" in problem.hint
            assert "self.env = None" in problem.hint and 'state["env"] = None' in problem.hint
        with env.begin() as txn:
            problem = mpcompat.explain(w.Holder(txn=txn), name="reader").problems[0]
            assert problem.path == "reader.txn" and "lmdb" in problem.hint
    finally:
        env.close()


def test_hint_h5py_file_and_dataset(tmp_path):
    with h5py.File(str(tmp_path / "data.h5"), "w") as handle:
        handle.create_dataset("points", data=[1.0, 2.0])
        for obj, name in ((handle, "h5"), (handle["points"], "points")):
            problem = mpcompat.explain(w.Holder(**{name: obj}), name="dataset").problems[0]
            assert problem.path == "dataset." + name
            assert problem.error == "TypeError: h5py objects cannot be pickled"
            fix = 'self.%s = mpcompat.per_process(h5py.File, path, "r")' % name
            assert fix in problem.hint
            assert problem.hint.index(fix) < problem.hint.index("open it lazily yourself")
            assert 'h5py.File(self.path, "r")' in problem.hint
            assert "self.%s = None" % name in problem.hint


def test_lazy_open_pattern_works_in_a_spawn_dataloader(tmp_path):
    path = str(tmp_path / "db")
    env = lmdb.open(path, map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(4):
            txn.put(b"%d" % i, b"%d" % (10 * i))
    env.close()
    dataset = w.LazyLmdbDataset(path)
    assert dataset[1] == 10 and dataset.env is not None  # opened here, and still picklable
    assert mpcompat.explain(dataset).ok
    loader = data.DataLoader(dataset, batch_size=4, num_workers=1,
                             multiprocessing_context="spawn")
    assert [batch.tolist() for batch in loader] == [[0, 10, 20, 30]]


def test_fork_context_lock_sent_to_a_spawn_process():
    lock = multiprocessing.get_context("fork").Lock()
    process = multiprocessing.get_context("spawn").Process(target=w.echo, args=(lock,))
    try:
        process.start()
    except RuntimeError as exc:
        from mpcompat.diagnose.notes import explanation_of
        problem = explanation_of(exc).problems[0]
        assert problem.path == "args[0]" and "fork context" in problem.error
        assert 'ctx = multiprocessing.get_context("spawn"); lock = ctx.Lock()' in problem.hint
    else:
        process.join()
        raise AssertionError("Python %s let a fork-context lock go to a spawn child"
                             % sys.version.split()[0])
