"""bench/control.py, fleet.py, floor.py, journal.py: a tiny fleet on a real
dispatcher, the drivers' own checks, the no-op server, the tables.

The figures of a tiny fleet are not compared (the bench measures).
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

from bench import control, fleet, journal
from bench.common import QUICK, Bench
from bench.fleet import KINDS, Schedule, Window
from tests.helpers import run_tiny_bench

pytestmark = pytest.mark.timeout(120)


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(fleet).failed == 0


def window(lags: list[float], due: int = 100, skipped: int = 0) -> Window:
    out = Window(1.0)
    out.due["consumer"] = due
    out.skipped["consumer"] = skipped
    out.lags = lags
    out.rtts["consumer"] = [0.001] * (due - skipped)
    return out


def test_a_window_is_behind_when_its_driver_was_late_or_sent_too_little() -> None:
    assert not window([0.0001] * 100).behind
    assert window([0.0001] * 90 + [0.01] * 10).behind  # p99 of its lag: 10 ms
    assert window([0.0001] * 90).behind  # 90 of 100 due went out
    saturated = window([0.0001] * 100, skipped=5)
    assert (saturated.saturated, saturated.behind) == (True, False)
    merged = window([0.0001] * 100).merge(window([0.0001] * 100, skipped=50))
    assert (merged.due["consumer"], merged.saturated) == (200, True)


def test_the_schedule_hands_out_what_is_due_in_order_of_slots() -> None:
    schedule = Schedule()
    for n in range(10):
        schedule.add(1.0 + n * 0.0004, n, "worker")
    first = schedule.take(1.0017)
    assert [index for _, index, _ in first] == [0, 1, 2, 3, 4]
    assert schedule.next_at() <= 1.002
    assert [index for _, index, _ in schedule.take(2.0)] == [5, 6, 7, 8, 9]
    assert schedule.next_at() == float("inf")


def run_tiny(folder: str, out: str) -> None:
    """A tiny control and journal run in this (fresh) process, as JSON in ``out``."""
    from bench.run import jsonable

    bench = Bench(QUICK, repeats=1, quick=True)
    sizes = control.ControlSizes(
        curve=(20,), window_s=1.0, requesters=4, journal_window_s=0.5
    )
    results = {
        "control": control.control(bench, sizes),
        "journal": control.journal(bench, sizes),
    }
    results["table"] = control.table(results)
    results["rows"] = control.rows(results["control"])
    Path(out).write_text(json.dumps(jsonable(results)))


def median(figure: Any) -> float:
    return float(figure["median"] if isinstance(figure, dict) else figure)


def test_a_tiny_fleet_and_journal_run_end_to_end(tmp_path: Path) -> None:
    results = run_tiny_bench("test_bench_control", str(tmp_path), timeout=110)
    [size] = results["control"]["curve"]
    assert size["peers"] == 20
    for kind in KINDS:
        assert median(size[f"{kind}_offered_per_s"]) > 0
        assert median(size[f"{kind}_served_per_s"]) > 0
    assert 0 <= median(size["dispatcher_cpu"]) < 2  # 10 ms clock ticks: may read 0
    assert size["floor"]["cpu"] >= 0
    assert size["floor"]["served_per_s"] > 0
    assert median(size["trainer_kept"]) > 0
    assert size["state"]["get_split_us"] > 0
    assert median(results["journal"]["concurrent"]["splits_per_s"]) > 0
    table = results["table"]
    assert "| 20 |" in table
    assert "group commit" in table
    [row] = results["rows"]
    assert row[0] == "control plane: 20 workers + 20 consumers"
    assert "dispatcher" in row[1]
    assert "no-op ZeroMQ server" in row[2]


def test_the_journal_table_names_its_runs() -> None:
    runs = {
        "concurrent": {
            "requesters": 4,
            "splits_per_s": 10.0,
            "commits_per_s": 2.0,
            "p50_ms": 1.0,
            "p99_ms": 2.0,
        }
    }
    assert "| concurrent, 4 requesters | 10 | 2 | 1.0 / 2.0 ms |" in journal.table(runs)
