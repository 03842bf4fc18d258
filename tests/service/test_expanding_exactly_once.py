"""Exactly once through 1-to-many ops: a lost worker's outputs are not made again.

Each output of ``unbatch``, ``flat_map`` and ``interleave`` carries a mark
(``_wire/progress.py``); consumers acknowledge it, and a worker that reads a
lost task's input element again skips the outputs delivered before. Here a
worker stops in the middle of expanding elements of 10 rows each (batches of 4
rows cross elements): every row must arrive exactly once.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata import service

ROWS = 10
N = 600


def rows(x):
    return np.arange(x * ROWS, (x + 1) * ROWS)


PIPELINES = {
    "unbatch": lambda: zd.Dataset.range(N).map(rows).unbatch().batch(4),
    "flat_map": lambda: (
        zd.Dataset.range(N)
        .flat_map(lambda x: zd.Dataset.from_tensor_slices(rows(x)))
        .batch(4)
    ),
    "interleave": lambda: (
        zd.Dataset.range(N)
        .interleave(
            lambda x: zd.Dataset.from_tensor_slices(rows(x)),
            cycle_length=3,
            block_length=2,
        )
        .batch(4)
    ),
    "nested": lambda: (
        zd.Dataset.range(N)
        .map(lambda x: rows(x).reshape(2, ROWS // 2))
        .unbatch()
        .unbatch()
        .batch(4)
    ),
}


def values(batches) -> list[int]:
    return [int(v) for batch in batches for v in np.ravel(batch)]


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_rows_arrive_exactly_once_when_a_worker_stops_mid_element(cluster, name):
    c = cluster(num_workers=2)
    ds = PIPELINES[name]().apply(
        service.distribute("distributed_epoch", c.target, max_outstanding_requests=2)
    )
    with iter(ds) as it:
        got = values(next(it) for _ in range(7))  # 28 rows: mid-element
        c.stop_worker(0)
        poll_for(lambda: c.num_registered_workers() == 1, timeout=10)
        got += values(it)
    counts = Counter(got)
    repeated = {row: n for row, n in counts.items() if n > 1}
    assert not repeated, f"{len(repeated)} rows repeated"
    assert sorted(counts) == list(range(N * ROWS))
