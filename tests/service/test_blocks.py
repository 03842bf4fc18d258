"""Blocks through the service: what a source reads in bulk travels as blocks, same elements.

Parquet rows (text, equal and ragged lists), ``from_tensor_slices`` and
``range`` through first-come reads, exactly once or not, with credit smaller
than a block (it is cut) and across a save.
"""

from __future__ import annotations

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, ints
from tests.dataset.test_parquet import SIZES, files, table, write  # noqa: F401 (fixture)
from zmqdata import service


def by_id(elements):
    return sorted(elements, key=lambda e: int(e["i"]))


@pytest.mark.parametrize("exactly_once", [True, False])
def test_parquet_rows_read_through_two_workers_are_the_local_rows(
    cluster,
    files,  # noqa: F811
    exactly_once,
):
    c = cluster(num_workers=2)
    ds = zd.Dataset.from_parquet(files)
    remote = ds.apply(
        service.distribute("distributed_epoch", c.target, exactly_once=exactly_once)
    )
    assert_bit_equal(by_id(list(remote)), list(ds))


@pytest.mark.parametrize("credit", [1, 3])
def test_blocks_are_cut_to_the_credit_and_keep_their_order(cluster, credit):
    c = cluster(num_workers=1)
    tensors = {"x": np.arange(3_000).reshape(1_000, 3), "y": np.arange(1_000) * 0.5}
    ds = zd.Dataset.from_tensor_slices(tensors)
    remote = ds.apply(
        service.distribute(
            "distributed_epoch", c.target, max_outstanding_requests=credit
        )
    )
    assert_bit_equal(list(remote), list(ds))


def test_a_save_inside_a_block_resumes_after_its_last_element(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(5_000).apply(
        service.distribute("distributed_epoch", c.target)
    )
    with iter(ds) as first:
        before = ints([next(first) for _ in range(1_234)])
        state = first.save()
    with iter(ds) as second:
        second.restore(state)
        after = ints(list(second))
    assert before + after == list(range(5_000))


def test_parallel_epochs_send_blocks_to_every_reader(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(3_000).apply(service.distribute("parallel_epochs", c.target))
    assert sorted(ints(ds)) == sorted(list(range(3_000)) * 2)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_elements_made_one_at_a_time_travel_gathered_and_arrive_as_made(
    cluster, exactly_once
):
    """A Python ``map`` after a ``shuffle``: the worker gathers its rows into blocks
    (ragged arrays, keys out of order, a filter's elements of several keys alone)."""
    c = cluster(num_workers=2)
    ds = (
        zd.Dataset.range(3_000)
        .shuffle(64, seed=3)
        .filter(lambda x: x % 10 != 0)
        .map(lambda x: {"i": x, "t": np.arange(x % 7, dtype=np.int32), "s": str(x)})
    )
    remote = ds.apply(
        service.distribute("distributed_epoch", c.target, exactly_once=exactly_once)
    )
    assert_bit_equal(by_id(list(remote)), by_id(list(ds)))


def scaled(rows):
    """Vectorized: a Parquet block's columns (or one row's, as columns of one)."""
    return {"i": rows["i"], "f": rows["f"] * 2, "v": rows["v"] + rows["i"][:, None]}


def kept(row):
    return bool(row["i"] % 3 != 1)


def rows_by_id(batches):
    rows = [
        {key: batch[key][k] for key in batch}
        for batch in batches
        for k in range(len(batch["i"]))
    ]
    return sorted(rows, key=lambda row: int(row["i"]))


def test_map_filter_batch_over_blocks_are_read_exactly_once(
    cluster,
    files,  # noqa: F811
):
    c = cluster(num_workers=2)
    ds = (
        zd.Dataset.from_parquet(files, columns=["i", "f", "v", "s"])
        .map(scaled, vectorized=True)
        .filter(kept)
        .batch(3)
    )
    remote = ds.apply(
        service.distribute("distributed_epoch", c.target, exactly_once=True)
    )
    assert_bit_equal(rows_by_id(remote), rows_by_id(ds))


def test_batches_of_blocks_from_one_worker_are_the_local_batches(cluster):
    c = cluster(num_workers=1)
    tensors = {"x": np.arange(2_000), "y": np.arange(4_000.0).reshape(2_000, 2)}
    ds = (
        zd.Dataset.from_tensor_slices(tensors)
        .map(lambda r: {"x": r["x"], "y": r["y"] * r["x"][:, None]}, vectorized=True)
        .filter(lambda r: r["x"] % 7 != 0)
        .batch(16)
    )
    remote = ds.apply(service.distribute("distributed_epoch", c.target))
    assert_bit_equal(list(remote), list(ds))
    large = zd.Dataset.from_tensor_slices(np.ones((64, 4_096), np.float32)).batch(8)
    remote = large.apply(service.distribute("distributed_epoch", c.target))
    assert_bit_equal(list(remote), list(large))  # 128 KiB batches go one by one


def test_a_save_inside_a_block_of_batches_resumes_after_its_last_batch(cluster):
    c = cluster(num_workers=1)
    ds = (
        zd.Dataset.range(6_000)
        .filter(lambda x: x % 5 != 0)
        .batch(4)
        .apply(service.distribute("distributed_epoch", c.target))
    )
    with iter(ds) as first:
        before = [int(x) for _ in range(321) for x in next(first)]
        state = first.save()
    with iter(ds) as second:
        second.restore(state)
        after = [int(x) for batch in second for x in batch]
    assert before + after == [x for x in range(6_000) if x % 5]
