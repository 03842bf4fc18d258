"""``service.lineage`` names what a real multi-rank read delivered, through a worker loss.

Each rank records every element it got, by step; the elements' values say
which source records made them (a ``range`` index, a Parquet file and row),
and ``lineage`` computed here with no cluster must name exactly those.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.service.cluster import Cluster
from tests.service.test_multirank import (
    Opened,
    fresh,
    on_ranks,
    on_ranks_paused,
    rank_dataset,
)
from zmqdata import service

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.timeout(60)

BATCHED = zd.Dataset.range(1_203).map(lambda i: i * 10).batch(4)
"""A batch's values are ten times its records' indices."""
SEED = 13


def read_through_a_loss(c: Cluster, ds: zd.Dataset, R: int) -> list[list[Any]]:
    """Every rank's elements; worker 1 stopped once each rank took 30 of them."""
    name = fresh("lineage")

    def body(r: int, opened: Opened, pause: Callable[[], None]) -> list[Any]:
        with opened(rank_dataset(c.target, ds, R, r, name, SEED)) as iterator:
            got = [next(iterator) for _ in range(30)]
            pause()  # the stopped worker's splits are made again by the other
            return got + list(iterator)

    return on_ranks_paused(R, body, lambda: c.stop_worker(1))


def delivered(streams: list[list[Any]], row: dict[str, Any]) -> Any:
    return streams[row["consumer_index"]][row["step"]]


def test_a_batch_names_its_range_indices_through_a_worker_loss(cluster):
    c = cluster(num_workers=2, worker_timeout_ms=300)
    R = 3
    streams = read_through_a_loss(c, BATCHED, R)
    rows = service.lineage(BATCHED, SEED, R, 0, R * len(streams[0]))
    assert len(rows) == 300  # 301 batches: the last round is not dealt
    for row in rows:
        indices = [record["index"] for record in row["sources"]]
        assert indices == (delivered(streams, row) // 10).tolist(), row
        assert {record["source"] for record in row["sources"]} == {0}


def write_parquet(folder: Path, sizes: list[int]) -> list[str]:
    """Files whose rows hold their file's number and their row number."""
    paths = []
    for number, rows in enumerate(sizes):
        path = folder / f"part-{number}.parquet"
        table = pa.table(
            {
                "file": pa.array([number] * rows, pa.int64()),
                "row": pa.array(range(rows), pa.int64()),
            }
        )
        pq.write_table(table, str(path), row_group_size=64)
        paths.append(str(path))
    return paths


def test_shuffled_parquet_rows_name_their_file_and_row_through_a_worker_loss(
    cluster, tmp_path
):
    paths = write_parquet(tmp_path, [301, 0, 257, 410])
    ds = zd.Dataset.from_parquet(sorted(paths)).shuffle(8, seed=2).batch(3)
    c = cluster(num_workers=2, worker_timeout_ms=300)
    R = 2
    streams = read_through_a_loss(c, ds, R)
    rows = service.lineage(ds, SEED, R, 0, R * len(streams[0]))
    assert len(rows) == 322  # splits of 15 rows (the last 8): 5 batches, 3 in the last
    for row in rows:
        batch = delivered(streams, row)
        named = [(r["path"], r["record"]) for r in row["sources"]]
        got = [
            (paths[f], int(i)) for f, i in zip(batch["file"], batch["row"], strict=True)
        ]
        assert named == got, row


def test_a_mixture_of_reads_names_the_source_each_rank_drew(cluster):
    """Two multi-rank reads mixed in every rank's trainer, with one seed."""
    c = cluster(num_workers=2)
    R = 2
    a = zd.Dataset.range(300)
    b = zd.Dataset.range(170).map(lambda i: 100_000 + i)
    names = fresh("mix-a"), fresh("mix-b")

    def mixture(inputs: list[zd.Dataset]) -> zd.Dataset:
        return zd.Dataset.sample_from_datasets(inputs, [0.3, 0.7], seed=5)

    def body(r: int, opened: Opened) -> list[int]:
        reads = [
            rank_dataset(c.target, ds, R, r, name, SEED)
            for ds, name in zip((a, b), names, strict=True)
        ]
        return [int(x) for x in opened(mixture(reads))]

    streams = on_ranks(R, body)
    assert len(streams[0]) == 300 // R + 170 // R
    rows = service.lineage(mixture([a, b]), SEED, R, 0, R * len(streams[0]))
    for row in rows:
        [record] = row["sources"]
        value = delivered(streams, row)
        assert (record["source"], record["index"]) == divmod(value, 100_000), row


def test_a_position_past_the_dealt_rounds_is_refused():
    with pytest.raises(
        ValueError, match="past the epoch's end: it deals 300 of its 301"
    ):
        service.lineage(BATCHED, SEED, 3, 299, 301)
    assert service.lineage(BATCHED, SEED, 3, 5, 5) == []
    with pytest.raises(TypeError, match="Dataset"):
        service.lineage(np.arange(3), SEED, 3, 0, 1)  # type: ignore[arg-type]
