"""The nuscenes and mmcv demo scenarios: each fails without mpcompat and works with it.

"Without" goes through the demo runner (a fresh interpreter, ``MPCOMPAT_DISABLE=1``); the
failure happens in the parent, before any worker starts. "With" runs the scenario here, with
one spawn worker instead of the demo's two (each worker imports torch and the library).
"""
import importlib

from mpcompat.cli import demo

NUSCENES, MMCV = "mpcompat.demo.scenario_nuscenes", "mpcompat.demo.scenario_mmcv"


def test_scenarios_are_listed():
    names = demo.scenarios()
    assert NUSCENES in names and MMCV in names


def test_nuscenes_scenario_fails_without_mpcompat():
    ok, summary, output = demo.run_scenario(NUSCENES, "without")
    assert not ok
    assert summary == "FAILED TypeError: cannot pickle 'dict_keys' object", output


def test_nuscenes_scenario_works_with_mpcompat():
    outcome = importlib.import_module(NUSCENES).run(workers=1)
    assert outcome == ("8 items from 1 spawn workers; 10 detection classes; tracking boxes "
                       "bicycle, bus, car, motorcycle, pedestrian, trailer, truck")


def test_mmcv_scenario_fails_without_mpcompat():
    ok, summary, output = demo.run_scenario(MMCV, "without")
    assert not ok
    assert summary == "FAILED TypeError: cannot pickle 'module' object", output


def test_mmcv_scenario_works_with_mpcompat():
    outcome = importlib.import_module(MMCV).run(workers=1)
    assert outcome.startswith("items [0, 1, 2, 3, 4, 5, 6, 7] from 1 spawn workers; mmcv ")
