"""bench/profiling.py: the on/off deployments' check, W1 at a tiny size, the tables.

The figures of a tiny W1 are not compared (the bench section measures).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import profiling
from bench.common import QUICK, Bench, Stat
from bench.exactly_once import compared

pytestmark = pytest.mark.timeout(20)


def test_w1_reads_from_two_deployments_only_the_on_one_reporting_ops(monkeypatch):
    checked: dict[str, list[dict]] = {}

    def check_ops(label: str, ops: list[dict]) -> None:
        checked[label] = ops
        check(label, ops)

    check = profiling.check_ops
    monkeypatch.setattr(profiling, "check_ops", check_ops)
    bench = Bench(replace(QUICK, w1_elements=2_000), repeats=1, quick=True)
    try:
        result = profiling.profiling(bench, ["W1"])
    finally:
        bench.close()
    assert [op["op"] for op in checked["on"]] == ["range"]
    assert checked["on"][0]["elements"] > 0
    assert checked["off"] == []
    w1 = result["W1"]
    assert len(w1["on"]["rate"].samples) == len(w1["off"]["rate"].samples) == 1
    assert w1["overhead"] == pytest.approx(1 - w1["on"]["rate"] / w1["off"]["rate"])
    assert "images" not in result


def test_the_check_waits_for_elements_out_and_wants_one_job():
    job = {"workers": [{"worker_id": 1}], "ops": [{"op": "range", "elements": 0}]}
    assert profiling.reported_ops({"jobs": [job]}) is None
    with pytest.raises(RuntimeError, match="one live job, the dispatcher has 2"):
        profiling.reported_ops({"jobs": [job, job]})
    with pytest.raises(RuntimeError, match=r"off: ZMQDATA_PROFILE_EVERY=0 but .* \[\{"):
        profiling.check_ops("off", job["ops"])
    with pytest.raises(ValueError, match="unknown workloads"):
        profiling.profiling(Bench(QUICK, 1), ["W3"])


def _workload(on: float, off: float) -> dict[str, object]:
    figures = {
        label: {"rate": Stat([rate, rate * 1.1])}
        for label, rate in (("on", on), ("off", off))
    }
    return {"about": "made up", "unit": "el/s", **compared(figures)}


def test_the_tables_hold_the_workloads_that_ran_against_a_2_percent_target():
    result = {"repeats": 2, "W1": _workload(97_000, 100_000)}
    table = profiling.details(result)
    assert (
        "| ZMQDATA_PROFILE_EVERY=16 (min-max) | ZMQDATA_PROFILE_EVERY=0 (min-max) |"
        in table
    )
    assert "| W1: made up | 101,850 el/s (97,000-106,700) |" in table
    assert "| 0.970x | 0.970x (0.970-0.970) | +3.0% | < 2% ✘ |" in table
    result["images"] = _workload(4_000, 4_040)
    assert [row[3] for row in profiling.rows(result)] == [
        "0.990x (+1.0% lost)",
        "0.970x (+3.0% lost)",
    ]
    assert [row[-1] for row in profiling.rows(result)] == ["< 2% lost ✔", "< 2% lost ✘"]
