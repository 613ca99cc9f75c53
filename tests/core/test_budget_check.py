"""benchmarks/bench_budgets.py's judgement on synthetic counts: the growth check (``--check``)
and the table's verdicts. The real measurement is .ci/test's bench_budgets step."""
import importlib.util
import json
import os

from testenv import REPO

_spec = importlib.util.spec_from_file_location(
    "bench_budgets", os.path.join(REPO, "benchmarks", "bench_budgets.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_growth_up_to_ten_percent_passes_and_more_fails():
    recorded = {"pass": 2.0, "import_pool": 10.0}
    assert bench.grown({"pass": 2.2, "import_pool": 9.0}, recorded) == []
    lines = bench.grown({"pass": 2.21, "import_pool": 11.01}, recorded)
    assert [line.split(":")[0] for line in lines] == ["pass", "import_pool"]
    assert "recorded +2.00 M" in lines[0] and "limit +2.20 M" in lines[0]


def test_rows_near_zero_get_the_absolute_slack():
    assert bench.grown({"disabled": 0.069}, {"disabled": 0.05}) == []
    assert bench.grown({"disabled": 0.071}, {"disabled": 0.05}) != []
    assert bench.grown({"disabled": 0.01}, {"disabled": -0.005}) == []


def test_a_row_without_recorded_value_fails_the_check():
    assert bench.grown({"pass": 1.0}, {})[0].startswith("pass: +1.00 M, no recorded value")


def test_table_verdicts_and_growth():
    results = {key: (100000000, 100000000 + int(target * 1e6) + (500000 if key == "pass" else 0))
               for key, _, _, _, _, target in bench.ROWS}
    budgets = {"python": "3.11.7", "date": "2026-01-01",
               "added_M": {key: target for key, _, _, _, _, target in bench.ROWS}}
    table = bench.table_of(results, budgets)
    rows = {row[0]: row for row in table.rows}
    passed = rows["`python -c pass`"]
    assert passed[3] == "**+2.00 M**" and passed[6] == "FAIL" and passed[7] == "+33.3%"
    assert all(row[6] == "pass" and row[7] == "+0.0%" for label, row in rows.items()
               if label != "`python -c pass`")
    assert bench.added_m(results)["pass"] == 2.0


def test_the_recorded_budgets_cover_every_row():
    with open(bench.BUDGETS) as f:
        budgets = json.load(f)
    assert sorted(budgets["added_M"]) == sorted(key for key, *_ in bench.ROWS)
    assert budgets["python"].count(".") == 2 and budgets["date"]
