"""The two standard-library Pool demo scenarios, each run by the demo runner in a fresh
interpreter without and with mpcompat (no torch, 3.8-3.13)."""
import importlib

from mpcompat.cli import demo

VIEWS, INITIALIZER = "mpcompat.demo.scenario_views_pool", "mpcompat.demo.scenario_pool_initializer"


def test_scenarios_are_listed_first_and_need_nothing():
    names = demo.scenarios()
    assert names[0] == VIEWS and INITIALIZER in names
    for name in (VIEWS, INITIALIZER):
        module = importlib.import_module(name)
        assert module.NEEDS == () and module.TIMEOUT <= 60
    assert importlib.import_module(INITIALIZER).TIMEOUT <= 30


def test_views_pool_fails_without_and_works_with_mpcompat():
    ok, summary, output = demo.run_scenario(VIEWS, "without", timeout=120)
    assert not ok and summary == "FAILED TypeError: cannot pickle 'dict_keys' object", output
    ok, summary, output = demo.run_scenario(VIEWS, "with", timeout=120)
    assert ok, output
    assert summary == ("OK 8 records counted by 2 spawn workers (in range: 14); class_names "
                       "['car', 'truck', 'pedestrian', 'barrier']")


def test_pool_initializer_hangs_without_and_fails_fast_with_mpcompat():
    ok, summary, output = demo.run_scenario(INITIALIZER, "without", timeout=6)
    assert not ok and summary == "FAILED timed out after 6 s (the Pool kept restarting " \
        "workers that die in its initializer)", output
    assert output.count("sqlite3.OperationalError: unable to open database file") >= 3
    ok, summary, output = demo.run_scenario(INITIALIZER, "with", timeout=60)
    assert ok, output
    assert summary.startswith("OK map() raised BrokenPool after ")
    assert " s, naming the workers' error: OperationalError: unable to open database file " \
        "(while running the Pool's initializer open_db() at " in summary, summary
    import inspect
    from mpcompat.demo import scenario_pool_initializer
    source, first = inspect.getsourcelines(scenario_pool_initializer.open_db)
    line = first + [i for i, text in enumerate(source) if "sqlite3.connect(" in text][0]
    assert summary.endswith("scenario_pool_initializer.py, line %d, in open_db)" % line), summary
