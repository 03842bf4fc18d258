"""SplitBatch: split requests sized from round trips and processing time (pure)."""

from __future__ import annotations

from zmqdata._worker.splitbatch import MAX_BATCH, ROUND_TRIPS_PER_BATCH, SplitBatch


def run(
    batch: SplitBatch, rtt_s: float, per_split_s: float, requests: int
) -> list[int]:
    """The sizes ``batch`` asks for over ``requests`` fetches, on a fake clock."""
    now, sizes = 0.0, []
    for _ in range(requests):
        size = batch.size(now)
        sizes.append(size)
        now += rtt_s
        batch.fetched(size, now)
        now += size * per_split_s
    return sizes


def test_cheap_splits_grow_twofold_per_request_up_to_the_cap():
    sizes = run(SplitBatch(), rtt_s=0.001, per_split_s=0.0001, requests=10)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 64, 64, 64]
    assert max(sizes) == MAX_BATCH


def test_expensive_splits_are_asked_for_one_at_a_time():
    sizes = run(SplitBatch(), rtt_s=0.001, per_split_s=1.0, requests=5)
    assert sizes == [1] * 5


def test_the_batch_settles_where_a_round_trip_is_a_small_share_of_the_work():
    rtt_s, per_split_s = 0.001, 0.004
    sizes = run(SplitBatch(), rtt_s, per_split_s, requests=8)
    settled = sizes[-1]
    assert settled == ROUND_TRIPS_PER_BATCH * rtt_s / per_split_s  # 5 splits
    assert sizes[-3:] == [settled] * 3


def test_the_batch_shrinks_when_splits_get_slower():
    batch = SplitBatch()
    fast = run(batch, rtt_s=0.001, per_split_s=0.0001, requests=8)
    slow = run(batch, rtt_s=0.001, per_split_s=1.0, requests=2)
    assert fast[-1] == MAX_BATCH
    assert slow[-1] == 1
