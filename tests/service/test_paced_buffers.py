"""Paced task buffers (``_worker/buffer.py``) against the reads that need room.

A task's buffer starts at 2 MiB and grows with the rate its readers take from
it; coordinated rounds take one element per consumer at once, so their buffer
must hold a round of any size from the start.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.service.test_coordinated_reads import read_rounds
from zmqdata import service
from zmqdata._worker.buffer import MIN_AHEAD_BYTES

SIZE = 3 * 2**20 // 2  # three consumers' round: 4.5 MiB, over the 2 MiB floor
pytestmark = pytest.mark.timeout(60)


def large(i: Any) -> tuple[np.ndarray[Any, Any], Any]:
    """``SIZE`` bytes, and the index (``read_rounds`` reads pairs)."""
    return np.full(SIZE, 7, np.uint8), i


def test_coordinated_rounds_of_large_elements_fit_in_the_buffer(cluster):
    c = cluster(num_workers=1)
    consumers = 3
    assert consumers * SIZE > MIN_AHEAD_BYTES
    datasets = [
        zd.Dataset.range(1)
        .repeat()
        .map(large)
        .apply(
            service.distribute(
                "parallel_epochs",
                c.target,
                job_name="large-rounds",
                consumer_index=index,
                num_consumers=consumers,
                compression=None,
            )
        )
        for index in range(consumers)
    ]
    rounds = read_rounds(datasets, 5)
    assert len(rounds) == 5
    assert all(array.nbytes == SIZE for row in rounds for array, _ in row)
