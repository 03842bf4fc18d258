"""bench/multirank.py: pass checks, figures and tables, from made-up results.

No timing and no cluster here (the bench section measures).
"""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

from bench import multirank
from bench.common import Stat

pytestmark = pytest.mark.timeout(10)


def _rank(units: int, count: int, start: float, end: float, cpu: float) -> dict:
    return {"units": units, "count": count, "start": start, "end": end, "cpu": cpu}


def test_a_pass_is_both_ranks_units_over_the_window_from_first_start_to_last_end():
    results = [_rank(500, 500, 10.0, 11.0, 0.2), _rank(500, 500, 10.5, 12.0, 0.3)]
    figures = multirank.pass_figures(results)
    assert figures["rate"] == pytest.approx(1000 / 2.0)
    assert figures["cpu_s_per_1k"] == pytest.approx(0.5)
    assert figures["units_per_element"] == 1
    batches = [_rank(640, 10, 0.0, 1.0, 0.1), _rank(640, 10, 0.0, 1.0, 0.1)]
    assert multirank.pass_figures(batches)["units_per_element"] == 64


def test_dealt_passes_give_every_rank_its_share_fcfs_the_whole_epoch():
    even = [_rank(50, 50, 0, 1, 0), _rank(50, 50, 0, 1, 0)]
    uneven = [_rank(60, 60, 0, 1, 0), _rank(40, 40, 0, 1, 0)]
    multirank.check_pass(True, even, 100)
    multirank.check_pass(False, uneven, 100)
    with pytest.raises(RuntimeError, match=r"dealt: ranks received \[60, 40\]"):
        multirank.check_pass(True, uneven, 100)
    with pytest.raises(RuntimeError, match="fcfs"):
        multirank.check_pass(False, even[:1], 100)


def test_units_count_a_batch_by_its_length_and_other_elements_as_one():
    assert multirank.units("W1", np.int64(3)) == 1
    assert multirank.units("images", np.zeros((64, 3, 2, 2))) == 64
    assert multirank.units("images", np.zeros((1, 3, 2, 2))) == 1
    assert multirank.units("images_unbatched", np.zeros((3, 2, 2))) == 1


def _workload(dealt: float, fcfs: float) -> dict[str, object]:
    figures = {
        mode: {
            "rate": Stat([rate, rate * 1.1]),
            "cpu_s_per_1k": Stat([0.01]),
            "units_per_element": Stat([1.0]),
        }
        for mode, rate in (("dealt", dealt), ("fcfs", fcfs))
    }
    return {
        "about": "made up",
        "unit": "el/s",
        **multirank.compared(figures, "dealt", "fcfs"),
    }


def test_the_tables_give_ratio_overhead_spread_target_and_latencies():
    latency = {
        key: Stat([1.0, 2.0, 3.0])
        for key in (
            "save_ms",
            "merge_ms",
            "restore_first_ms",
            "iter_ms",
            "restore_ms",
            "first_ms",
            "fresh_first_ms",
            "fcfs_first_ms",
        )
    }
    w1 = _workload(90_000, 100_000)
    w1["latency"] = {"rounds": 3, "state_bytes": 250, "merged_bytes": 275, **latency}
    result = {
        "repeats": 2,
        "ranks": 2,
        "workers": 2,
        "W1": w1,
        "images": _workload(4_000, 4_100),
    }
    assert w1["round_ratios"].samples == pytest.approx((0.9, 0.9))
    table = multirank.details(result)
    assert "| W1: made up | 94,500 el/s (90,000-99,000) |" in table
    assert "| 0.900x | 0.900x (0.900-0.900) |" in table
    assert "| +10.0% | < 5% ✘ |" in table
    assert "| W1 | it.save() on a rank | 2.00 | 2.80 | 1.00-3.00 | 3 |" in table
    rows = multirank.rows(result)
    assert [row[3] for row in rows] == ["0.900x (+10.0% lost)", "0.976x (+2.4% lost)"]
    assert [row[-1][-1] for row in rows] == ["✘", "✔"]
    skipped = {**result, "images": {"skipped": "no PIL"}}
    assert "images | skipped: no PIL" in multirank.details(skipped)
    assert len(multirank.rows(skipped)) == 1


def test_a_rank_runs_commands_and_reports_its_errors():
    parent, child = multiprocessing.Pipe()
    thread = threading.Thread(target=multirank._rank_main, args=("unused", 0, child))
    thread.start()
    parent.send(("no_such_command", ()))
    status, text = parent.recv()
    assert status == "error"
    assert "AttributeError" in text
    parent.send(None)
    thread.join(5)
    assert not thread.is_alive()
