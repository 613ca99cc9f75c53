"""The demo scenario mpcompat.demo.scenario_main_guard, through the demo runner: a spawn
Pool mapping an object whose class is defined under the main guard (stdlib only)."""
from mpcompat.cli import demo
from testenv import missing_in_main

NAME = "mpcompat.demo.scenario_main_guard"


def test_scenario_is_listed_and_stdlib_only():
    import importlib
    assert NAME in demo.scenarios()
    module = importlib.import_module(NAME)
    assert module.NEEDS == () and module.TIMEOUT <= 30


def test_without_mpcompat_the_parent_learns_nothing():
    ok, summary, output = demo.run_scenario(NAME, "without", timeout=60)
    assert not ok
    assert summary.startswith("FAILED RuntimeError: the parent got "
                              "multiprocessing.context.TimeoutError() after 5."), output
    assert "worker processes died, each printing only to its own stderr \"AttributeError: " \
           + missing_in_main("Normalize") in summary
    assert "mpcompat:" not in output


def test_with_mpcompat_the_pools_error_names_the_class_the_line_and_the_fix():
    ok, summary, output = demo.run_scenario(NAME, "with", timeout=60)
    assert ok, output
    assert summary.startswith("OK the Pool's AttributeError, after "), summary
    assert summary.endswith(" s, names class Normalize, defined inside `if __name__ == "
                            "\"__main__\":` of train.py, line 12, and the fix: move it to module "
                            "level")
