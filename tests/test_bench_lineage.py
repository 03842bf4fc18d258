"""bench/lineage_costs.py: its figures come out, on a small dataset and a short read."""

from __future__ import annotations

import pytest

from bench import lineage_costs

pytestmark = pytest.mark.timeout(60)


def test_a_lookup_runs_one_split_of_the_map():
    figures = lineage_costs.lookup(100_000, ranks=4, repeats=1)
    assert 0 < figures["map_calls"] <= 100_000 // 64
    assert figures["ms"] > 0


def test_the_log_costs_and_size_are_measured():
    figures = lineage_costs.log("scalars", steps=40, block=10)
    assert 16 <= figures["mb_per_million_steps"] < 30  # 16 bytes a row, a streams line
    assert figures["record_us"] > 0
    assert figures["read_us_per_step"] > 0
