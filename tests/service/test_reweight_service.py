"""Re-weighting a mixture of multi-rank reads on resume: Parquet and TFRecord sources.

Two sources, each read through the service as a multi-rank read (one job per
source), mixed in the trainer by ``sample_from_datasets``: rank threads on an
in-process cluster. Two ranks read with weights 0.7 / 0.3, a worker is
stopped mid-read, every rank saves at the same step; the merged position
restores on three ranks (fresh jobs) with weights 0.2 / 0.8. Across the two
runs every source element comes at most once, none is missing but a last
incomplete round of each source (fewer than three: no rank gets them), every
rank of a run takes the same number of steps, and the new weights apply.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.dataset.test_reweight import restored, saved_mid_way
from tests.service.cluster import Cluster
from tests.service.test_multirank import Opened, fresh, on_ranks, on_ranks_paused
from zmqdata import service
from zmqdata._dataset import saved
from zmqdata._dataset.ops.tfrecord import write
from zmqdata.errors import InvalidArgumentError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("google_crc32c")

pytestmark = pytest.mark.timeout(60)

ROWS, RECORDS = 1_200, 900
"""Parquet rows hold ids ``0..ROWS``, TFRecord records ``100_000 + 0..RECORDS``."""
FIRST_RECORD = 100_000
BATCH, SAVE_AT = 4, 60
"""Two ranks read ``SAVE_AT`` batches (480 elements) before every rank saves."""
STOP_AT = 20
"""The step at which a worker stops."""
SAVED_WEIGHTS, NEW_WEIGHTS = [0.7, 0.3], [0.2, 0.8]


def write_sources(folder: Path) -> tuple[list[str], list[str]]:
    """Three Parquet files (row groups of 50) and three TFRecord files."""
    parquet, tfrecord = [], []
    for f in range(3):
        path = folder / f"rows-{f}.parquet"
        ids = range(f * ROWS // 3, (f + 1) * ROWS // 3)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path, 50)
        parquet.append(str(path))
        path = folder / f"records-{f}.tfrecord"
        numbers = range(f * RECORDS // 3, (f + 1) * RECORDS // 3)
        write(str(path), [str(FIRST_RECORD + n).encode() for n in numbers])
        tfrecord.append(str(path))
    return parquet, tfrecord


def sources(parquet: list[str], tfrecord: list[str]) -> list[zd.Dataset]:
    """Both as int64 ids, decoded on the workers."""
    return [
        zd.Dataset.from_parquet(parquet).map(lambda row: row["id"]),
        zd.Dataset.from_tfrecord(tfrecord).map(lambda r: np.int64(int(r))),
    ]


def mixture(
    target: str,
    files: tuple[list[str], list[str]],
    weights: list[float],
    job: str,
    R: int | None = None,
    r: int | None = None,
    order: tuple[int, int] = (0, 1),
) -> zd.Dataset:
    """Rank ``r`` of ``R``: each source a multi-rank read (seed 11), mixed by seed 5.

    ``R`` None: ``zmqdata.torch.IterableDataset`` fills in the ranks.
    """
    reads = [
        source.apply(
            service.distribute(
                "distributed_epoch",
                target,
                job_name=f"{job}-{k}",
                num_consumers=R,
                consumer_index=r,
                seed=11,
                max_outstanding_requests=4,
            )
        )
        for k, source in enumerate(sources(*files))
    ]
    mixed = [reads[k] for k in order]
    return zd.Dataset.sample_from_datasets(mixed, weights=weights, seed=5).batch(BATCH)


def from_records(elements: list[int]) -> float:
    return sum(x >= FIRST_RECORD for x in elements) / len(elements)


@pytest.fixture
def files(tmp_path: Path) -> tuple[list[str], list[str]]:
    return write_sources(tmp_path)


def saved_run(
    c: Cluster, files: tuple[list[str], list[str]], stop: Callable[[], None]
) -> tuple[list[list[int]], list[bytes]]:
    """Two ranks: ``STOP_AT`` steps, ``stop()``, on to ``SAVE_AT``, save, read on."""
    job = fresh("reweight")

    def body(
        r: int, opened: Opened, pause: Callable[[], None]
    ) -> tuple[list[int], bytes]:
        ds = mixture(c.target, files, SAVED_WEIGHTS, job, 2, r)
        with opened(ds) as it:
            took = [x for batch in itertools.islice(it, STOP_AT) for x in ints(batch)]
            pause()
            took += [
                x for b in itertools.islice(it, SAVE_AT - STOP_AT) for x in ints(b)
            ]
            state = it.save()
            ints(itertools.islice(it, 5))  # read after the save: comes again
            return took, state

    results = on_ranks_paused(2, body, stop)
    return [took for took, _ in results], [state for _, state in results]


def test_a_merged_mixture_resumes_on_three_ranks_with_new_weights(cluster, files):
    c = cluster(num_workers=2, worker_timeout_ms=300)
    took, states = saved_run(c, files, lambda: c.stop_worker(1))
    assert [len(t) for t in took] == [SAVE_AT * BATCH] * 2
    merged = service.merge_positions(list(reversed(states)))  # any order
    job = fresh("reweighted")

    def body(r: int, opened: Opened) -> list[list[int]]:
        with opened(mixture(c.target, files, NEW_WEIGHTS, job, 3, r)) as it:
            it.restore(merged)
            return [ints(batch) for batch in it]

    resumed = on_ranks(3, body)
    assert len({len(steps) for steps in resumed}) == 1  # equal steps on every rank
    after = [[x for batch in steps for x in batch] for steps in resumed]
    counts = Counter(x for part in took + after for x in part)
    assert max(counts.values()) == 1  # nothing came twice
    everything = [*range(ROWS), *range(FIRST_RECORD, FIRST_RECORD + RECORDS)]
    missing = set(everything) - set(counts)
    assert not set(counts) - set(everything)
    # Only a last incomplete round of each source is missing (< 3 each).
    assert sum(x < FIRST_RECORD for x in missing) < 3
    assert sum(x >= FIRST_RECORD for x in missing) < 3
    # The saved weights before, the new ones after (the first 100 of a rank:
    # no source has ended there).
    assert from_records(took[0]) == pytest.approx(0.3, abs=0.08)
    assert from_records(after[0][:100]) == pytest.approx(0.8, abs=0.1)
    # Each rank's mixture made the same choices: it is seeded alike.
    assert [from_records(part) for part in after] == [from_records(after[0])] * 3


def test_a_restore_into_another_pipeline_is_refused_naming_what_differs(cluster, files):
    c = cluster(num_workers=2)
    _, states = saved_run(c, files, lambda: None)
    merged = service.merge_positions(states)
    swapped = mixture(c.target, files, NEW_WEIGHTS, fresh("x"), 3, 0, order=(1, 0))
    with (
        iter(swapped) as it,
        pytest.raises(
            InvalidArgumentError, match=r"datasets\[0\] is not the saved mixture's"
        ),
    ):
        it.restore(merged)
    one_rank = mixture(c.target, files, NEW_WEIGHTS, fresh("y"), 3, 0)
    with iter(one_rank) as it, pytest.raises(InvalidArgumentError, match="merge"):
        it.restore(states[0])  # a single rank's save, not the merged position
    later = saved.decode(states[1])
    later["input"]["used"] += 1  # rank 1's mixture one choice further
    with pytest.raises(InvalidArgumentError, match="differ outside the service reads"):
        service.merge_positions([states[0], saved.encode(later)])


def test_a_mixture_of_single_reads_resumes_with_new_weights(cluster):
    c = cluster(num_workers=2)

    def mix(weights: list[float]) -> zd.Dataset:
        reads = [
            zd.Dataset.range(first, first + 600).apply(
                service.distribute("distributed_epoch", c.target)
            )
            for first in (0, FIRST_RECORD)
        ]
        return zd.Dataset.sample_from_datasets(reads, weights=weights, seed=3)

    before, state = saved_mid_way(mix(SAVED_WEIGHTS), at=300)
    after = restored(mix(NEW_WEIGHTS), state)
    assert Counter(before + after) == Counter(
        [*range(600), *range(FIRST_RECORD, FIRST_RECORD + 600)]
    )
    assert from_records(before) == pytest.approx(0.3, abs=0.08)
    assert from_records(after[:200]) == pytest.approx(0.8, abs=0.1)
