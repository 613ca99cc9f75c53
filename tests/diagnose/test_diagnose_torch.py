"""The error hooks with torch: DataLoader workers, torch.multiprocessing.spawn, TorchScript
hints and the demo scenario (Python 3.8 with torch 1.9.1, Python 3.11 with torch 2.13).

A DataLoader whose worker arguments cannot be pickled fails before any child starts, so these
tests cost no worker processes.
"""
import re
import sys
import threading

import pytest
import torch
import torch.multiprocessing
import torch.utils.data as data

import diagnose_workers as w
import mpcompat
from mpcompat.diagnose.notes import notes_of
from testenv import LOCAL_OBJECT_ERROR

NOTES = "multiprocessing.pickling_notes"
pytestmark = pytest.mark.filterwarnings("ignore:Got pickle error:UserWarning")


def flat(text):
    """``text`` with all whitespace runs made single spaces."""
    return " ".join(text.split())


def note(exc):
    """The one mpcompat note on ``exc``, flattened."""
    notes = notes_of(exc)
    assert len(notes) == 1, (exc, notes)
    return flat(notes[0])


def first_batch_error(loader):
    """Iterate ``loader``, which must fail; return the exception."""
    with pytest.raises(Exception) as info:
        next(iter(loader))
    return info.value


def lambda_dataset():
    """A dataset with a lambda at ``dataset.pipeline.transforms[2]``."""
    return w.Dataset(w.Pipeline([w.Transform("load"), w.Transform("flip"),
                                 w.make_local_lambda(), w.Transform("pack")]))


def test_dataloader_worker_names_the_dataset_path(restore_mpcompat):
    def loader():
        return data.DataLoader(lambda_dataset(), batch_size=2, num_workers=2,
                               multiprocessing_context="spawn")
    mpcompat.activate(disabled_patches=[NOTES])
    plain = first_batch_error(loader())
    assert notes_of(plain) == [] and "dataset" not in str(plain)
    mpcompat.activate()
    exc = first_batch_error(loader())
    assert type(exc) is type(plain) is LOCAL_OBJECT_ERROR
    text = note(exc)
    if sys.version_info >= (3, 11):
        # Two lambdas: from 3.14 the message holds each one's address.
        assert re.sub(" at 0x[0-9a-f]+", "", str(exc)) == re.sub(" at 0x[0-9a-f]+", "",
                                                                 str(plain))
    else:  # no exc.add_note before 3.11: the note is appended to the message
        assert str(exc) == str(plain) + "\n" + notes_of(exc)[0]
    assert text.startswith("mpcompat: DataLoader worker process 0 could not be started "
                           "(start method 'spawn')")
    assert ("dataset.pipeline.transforms[2] "
            "(function diagnose_workers.make_local_lambda.<locals>.<lambda>)") in text
    assert "functools.partial" in text
    assert "index_queue" not in text and "base_seed" not in text


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_dataloader_collate_fn_and_worker_init_fn(method):
    loader = data.DataLoader(w.Dataset(w.Pipeline([])), batch_size=2, num_workers=1,
                             collate_fn=w.LAMBDA, multiprocessing_context=method)
    text = note(first_batch_error(loader))
    assert "(start method %r)" % method in text
    assert "collate_fn (function diagnose_workers.<lambda>)" in text
    loader = data.DataLoader(w.Dataset(w.Pipeline([])), batch_size=2, num_workers=1,
                             worker_init_fn=w.make_local_function(),
                             multiprocessing_context=method)
    text = note(first_batch_error(loader))
    assert "worker_init_fn (function diagnose_workers.make_local_function.<locals>.scale)" \
        in text


def test_torch_multiprocessing_spawn():
    with pytest.raises(LOCAL_OBJECT_ERROR) as info:
        torch.multiprocessing.spawn(w.make_local_function(), nprocs=1)
    text = note(info.value)
    assert "torch.multiprocessing.spawn process 0 could not be started" in text
    assert "fn (function diagnose_workers.make_local_function.<locals>.scale)" in text
    with pytest.raises(TypeError) as info:
        torch.multiprocessing.spawn(w.add, args=(w.Holder(lock=threading.Lock()),), nprocs=1)
    assert "args[0].lock (_thread.lock object)" in note(info.value)


def scripted_add_one(x):
    """A function for torch.jit.script (it needs the source file)."""
    return x + 1


def test_hint_torchscript():
    function = torch.jit.script(scripted_add_one)
    module = torch.jit.script(torch.nn.Linear(2, 2))
    for obj in (function, module):
        problem = mpcompat.explain(w.Holder(model=obj), name="task").problems[0]
        assert problem.path == "task.model" and problem.type is type(obj)
        assert "TorchScript" in problem.hint and "torch.jit.save" in problem.hint


def test_tensors_are_not_walked():
    obj = {"weights": [torch.zeros(1000) for _ in range(50)], "hook": w.make_local_lambda()}
    problem = mpcompat.explain(obj, name="state").problems[0]
    assert problem.path == "state['hook']"
    assert mpcompat.explain({"weights": torch.zeros(10, 10)}).ok


def test_demo_scenario_reports_the_path(restore_mpcompat):
    from mpcompat.demo import scenario_lambda_transform
    mpcompat.activate()
    outcome = scenario_lambda_transform.run()
    assert "dataset.pipeline.transforms[2]" in outcome and "lambda" in outcome
    mpcompat.deactivate()
    with pytest.raises(LOCAL_OBJECT_ERROR) as info:
        scenario_lambda_transform.run()
    assert notes_of(info.value) == [] and "<lambda>" in str(info.value)
