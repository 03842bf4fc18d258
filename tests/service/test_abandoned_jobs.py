"""A multi-rank job one of whose ranks never comes: bounded buffers, then job GC.

The ranks present read ahead of the absent one until the workers' buffers
hold their bound of its share, then wait for it; once they leave, job GC
collects the iteration and the workers free its tasks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from tests.service.test_multirank import dealt, key, rank_dataset, reference

pytestmark = pytest.mark.timeout(60)

GC = {"job_gc_check_interval_ms": 50, "job_gc_timeout_ms": 300}
BUFFER_ITEMS = 1_024
"""The workers' ``BUFFER_ITEMS`` here (``small_buffers``): a few of them make the data."""
SIZE = 6_000
DATA = zd.Dataset.range(SIZE)
"""Small elements: a worker's buffer is bounded by its ``BUFFER_ITEMS``."""


@pytest.fixture(autouse=True)
def small_buffers(monkeypatch):
    monkeypatch.setattr("zmqdata._worker.task.BUFFER_ITEMS", BUFFER_ITEMS)


SEED = 3


class Rank:
    """One rank reading on a thread, its elements counted as they come."""

    def __init__(self, target: str, r: int, name: str) -> None:
        self.keys: list[Any] = []
        self.error: BaseException | None = None
        dataset = rank_dataset(target, DATA, 2, r, name, SEED)
        self.iterator = iter(dataset)
        self._thread = threading.Thread(target=self._read, name=f"rank-{r}")
        self._thread.start()

    def _read(self) -> None:
        try:
            for element in self.iterator:
                self.keys.append(key(element))
        except BaseException as error:  # the test reports it
            self.error = error

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        """Ends the read, from any thread (a ``next`` waiting there ends)."""
        self.iterator.close()
        self._thread.join(10)
        assert self.done


def buffered(workers: list[Any]) -> list[int]:
    """The elements each worker holds for its consumers."""
    return [worker.stats()["buffered_elements"] for worker in workers]


STALLED_S = 1.0
"""How long a rank that waits on full buffers reads nothing (its pauses
before the bound held were 0.2 s at most)."""


def fill_up(c: Cluster, rank: Rank) -> None:
    """Waits until ``rank`` waits on full buffers; fails if one went past its bound.

    The bound: ``BUFFER_ITEMS``, and one split more while a reader waits
    on the producer (``DealtBuffer.put``).
    """
    workers = c.workers
    seen: list[list[int]] = []
    last, since = -1, 0.0  # the rank's count while the buffers are full, since when

    def stalled() -> bool:
        nonlocal last, since
        seen.append(buffered(workers))
        # Full: the next block (a split's rows, put whole) would not fit.
        full = all(h >= BUFFER_ITEMS // 2 for h in seen[-1])
        count = len(rank.keys) if full else -1
        now = time.monotonic()
        if count != last:
            last, since = count, now
        return rank.done or (count >= 0 and now - since >= STALLED_S)

    poll_for(stalled, timeout=20)
    assert not rank.done, f"rank 0 read its {len(rank.keys)} without rank 1"
    assert rank.error is None
    [job] = c.status()["jobs"]
    split = -(-SIZE // job["splits"]["total"])
    highest = [max(column) for column in zip(*seen, strict=True)]
    assert all(h <= BUFFER_ITEMS + split for h in highest), (highest, split)


def test_a_rank_that_never_comes_leaves_the_buffers_bounded_and_the_job_collected(
    cluster,
):
    c = cluster(2, dispatcher_options=GC)
    rank = Rank(c.target, 0, "abandoned")
    try:
        fill_up(c, rank)  # rank 0 waits for rank 1: the bound holds
    finally:
        rank.close()
    # Rank 0 left; rank 1 never came: job GC collects the iteration after
    # job_gc_timeout_ms, and the workers free its tasks and buffers.
    poll_for(lambda: all(not w.stats()["tasks"] for w in c.workers))
    assert buffered(c.workers) == [0, 0]
    [job] = c.status()["jobs"]
    assert job["num_iterations"] == 0


def test_ranks_ahead_wait_for_a_late_rank_and_get_their_streams(cluster):
    c = cluster(2)
    ranks = [Rank(c.target, 0, "late")]
    try:
        fill_up(c, ranks[0])
        ranks.append(Rank(c.target, 1, "late"))
        poll_for(lambda: all(rank.done for rank in ranks), timeout=20)
    finally:
        for rank in ranks:
            rank.close()
    assert [rank.error for rank in ranks] == [None, None]
    assert [rank.keys for rank in ranks] == dealt(reference(DATA, SEED), 2)
