"""Chaos: a weighted mixture of three sources, packed, reads every token once.

The second test saves the packed mixture mid-read, after a worker was killed,
and restores it into the same pipeline with other weights while another
worker is killed: the rows before the save and after the restore hold every
token once, and the new weights show in what the resumed read draws.

Every process but the trainer is real: a fault-tolerant ``zmqdata dispatcher``
and three ``zmqdata worker`` daemons. Three sources of variable-length token
sequences (every token id unique across them) are each read exactly once from
the service (``distributed_epoch``), mixed by weight in the trainer
(``sample_from_datasets``) and packed into rows (``pack``). At a random row a
worker is killed -9 (a new one starts): the tokens of the packed rows must be
every source token exactly once, and the read must end in time.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials (default 1);
``ZMQDATA_CHAOS_SEED`` the sequences and faults drawn.
"""

from __future__ import annotations

import os
import random
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.service.test_chaos_formats import Cluster, within
from zmqdata import service

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "1"))
SEED = int(os.environ.get("ZMQDATA_CHAOS_SEED", "26"))
SEQUENCES = (400, 300, 200)  # per source
WEIGHTS = [0.5, 0.3, 0.2]
LENGTH = 64  # a packed row's slots
READ_DEADLINE_S = 30.0


def source(lengths: np.ndarray[Any, Any], first: int) -> zd.Dataset:
    """Sequence ``j`` holds the token ids ``first + sum(lengths[:j]) + 0..lengths[j]``."""
    starts = first + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return zd.Dataset.range(len(lengths)).map(
        lambda j: np.arange(starts[j], starts[j] + lengths[j], dtype=np.int64)
    )


def tokens_of(row: dict[str, np.ndarray[Any, Any]]) -> list[int]:
    return row["tokens"][row["segment_ids"] > 0].tolist()


def packed_mixture(
    cluster: Cluster,
    lengths: list[np.ndarray[Any, Any]],
    weights: list[float],
    seed: int,
) -> zd.Dataset:
    """The three sources, each read from the service, mixed by ``weights`` and packed."""
    firsts = np.concatenate([[0], np.cumsum([part.sum() for part in lengths])])
    reads = [
        source(part, int(first)).apply(
            service.distribute(
                "distributed_epoch", cluster.target, max_outstanding_requests=2
            )
        )
        for part, first in zip(lengths, firsts[:-1], strict=True)
    ]
    return zd.Dataset.sample_from_datasets(reads, weights, seed=seed).pack(LENGTH)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_packed_mixture_reads_every_token_once_when_a_worker_dies(
    tmp_path: Path, trial: int
) -> None:
    rng = random.Random(SEED + trial)
    draw = np.random.default_rng(SEED + trial)
    lengths = [draw.integers(1, LENGTH + 1, size=n) for n in SEQUENCES]
    total = int(sum(part.sum() for part in lengths))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        packed = packed_mixture(cluster, lengths, WEIGHTS, trial)
        at = rng.randrange(1, total // LENGTH)

        def read() -> list[int]:
            with iter(packed) as rows:
                got = [t for _ in range(at) for t in tokens_of(next(rows))]
                cluster.kill_worker(rng)
                return got + [t for row in rows for t in tokens_of(row)]

        got = within(READ_DEADLINE_S, read, f"a packed mixture, worker killed at {at}")
        cluster.settled()
    assert len(got) == total, (len(got), total)
    assert sorted(got) == list(range(total)), f"worker killed at row {at}"


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_mixture_restored_with_new_weights_reads_every_token_once_through_kills(
    tmp_path: Path, trial: int
) -> None:
    rng = random.Random(SEED + 100 + trial)
    draw = np.random.default_rng(SEED + 100 + trial)
    lengths = [draw.integers(1, LENGTH + 1, size=n) for n in SEQUENCES]
    total = int(sum(part.sum() for part in lengths))
    firsts = np.cumsum([0] + [int(part.sum()) for part in lengths])
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        at = rng.randrange(total // LENGTH // 4, total // LENGTH // 2)

        def before() -> tuple[list[int], bytes]:
            with iter(packed_mixture(cluster, lengths, WEIGHTS, trial)) as rows:
                got = [t for _ in range(at // 2) for t in tokens_of(next(rows))]
                cluster.kill_worker(rng)
                got += [t for _ in range(at - at // 2) for t in tokens_of(next(rows))]
                return got, rows.save()

        got, state = within(READ_DEADLINE_S, before, f"saved at row {at}")
        reweighted = packed_mixture(cluster, lengths, [0.1, 0.1, 0.8], trial)

        def after() -> list[int]:
            with iter(reweighted) as rows:
                rows.restore(state)
                first = tokens_of(next(rows))
                cluster.kill_worker(rng)
                return first + [t for row in rows for t in tokens_of(row)]

        rest = within(READ_DEADLINE_S, after, "restored with new weights")
        cluster.settled()
    assert sorted(got + rest) == list(range(total)), f"saved at row {at}"
    # Source 2 (weight 0.8 now) runs out first: its share of the first resumed
    # rows is above the 0.2 it had before the save.
    head = rest[: len(rest) // 4]
    share = sum(firsts[2] <= t < firsts[3] for t in head) / len(head)
    assert share > 0.4, share
