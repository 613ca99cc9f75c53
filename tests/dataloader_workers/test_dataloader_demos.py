"""The two DataLoader demo scenarios work with mpcompat (their "without" is what
test_dataloader_batches.py checks as "before"). Each runs a script in a child interpreter with
mpcompat active at start-up, bounded by the scenario's timeout."""
import importlib

from mpcompat.cli import demo

BATCH = "mpcompat.demo.scenario_unpicklable_batch"
GUARD = "mpcompat.demo.scenario_dataset_under_main_guard"


def test_scenarios_are_listed_with_their_needs():
    names = demo.scenarios()
    for name in (BATCH, GUARD):
        module = importlib.import_module(name)
        assert name in names
        assert module.NEEDS == ("torch",) and module.TIMEOUT <= 30


def test_unpicklable_batch_scenario_names_the_lock():
    outcome = importlib.import_module(BATCH).run()
    assert "the main process raises TypeError naming batch['lock']  (_thread.lock object)" \
        in outcome, outcome


def test_dataset_under_main_guard_scenario_names_the_class_and_the_fix():
    outcome = importlib.import_module(GUARD).run()
    assert "exited unexpectedly: mpcompat: class MyDS is defined inside `if __name__ == " \
           "\"__main__\":` of train.py, line 8 ... Move the class MyDS to module level" \
        in outcome, outcome
