"""bench/exactly_once.py: interleaved passes and its tables, from made-up figures.

No timing here (the bench section measures).
"""

from __future__ import annotations

import pytest

from bench import exactly_once

pytestmark = pytest.mark.timeout(10)


def test_passes_interleave_reversing_the_order_every_round_after_a_warm_up():
    calls: list[str] = []

    def pass_of(label: str, rates: list[float]) -> exactly_once.Pass:
        def once() -> exactly_once.Figures:
            calls.append(label)
            return {"rate": rates[len([c for c in calls if c == label]) - 1]}

        return once

    figures = exactly_once.interleaved(
        {
            "on": pass_of("on", [1, 90, 80, 70]),
            "off": pass_of("off", [1, 100, 100, 100]),
        },
        repeats=3,
    )
    assert calls == ["on", "off", "on", "off", "off", "on", "on", "off"]
    assert figures["on"]["rate"].samples == (90, 80, 70)  # the warm-up left out
    result = exactly_once.compared(figures)
    assert result["ratio"] == pytest.approx(80 / 100)
    assert result["overhead"] == pytest.approx(0.2)
    assert result["round_ratios"].samples == pytest.approx((0.9, 0.8, 0.7))


def _workload(on: float, off: float, **extra: float) -> dict[str, object]:
    figures = {
        label: {"rate": exactly_once.Stat([rate, rate * 1.1]), **extra}
        for label, rate in (("on", on), ("off", off))
    }
    return {"about": "made up", "unit": "el/s", **exactly_once.compared(figures)}


def test_the_tables_give_ratio_overhead_spread_and_the_target():
    cpu = {"cpu_s_per_1k": exactly_once.Stat([0.015])}
    result = {
        "repeats": 2,
        "W1": _workload(90_000, 100_000),
        "W3": _workload(3_000, 3_000),
        "rows": _workload(500_000, 520_000),
        "images": _workload(4_000, 4_100, **cpu),
    }
    table = exactly_once.details(result)
    assert "| W1: made up | 94,500 el/s (90,000-99,000) |" in table
    assert "| 0.900x | 0.900x (0.900-0.900) | +10.0% | < 5% ✘ |" in table
    assert "images: trainer CPU s per 1,000 images | 0.0150" in table
    rows = exactly_once.rows(result)
    assert [row[3] for row in rows] == [
        "0.900x (+10.0% lost)",
        "1.000x (+0.0% lost)",
        "0.962x (+3.8% lost)",
        "0.976x (+2.4% lost)",
    ]
    assert [row[-1][-1] for row in rows] == ["✘", "✔", "✔", "✔"]
