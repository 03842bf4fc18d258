"""``LineageLog``: each rank's steps, logged as it reads, name the records it got.

Elements are ``range`` indices, so the records a step took are its values.
The log is checked across a save and a restore on another number of ranks
(steps logged again after the checkpoint), an epoch's end inside a step,
and a torn write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.service.test_multirank import Opened, fresh, on_ranks, rank_dataset
from zmqdata import service

pytestmark = pytest.mark.timeout(60)

PIPELINE = zd.Dataset.range(500)
SEED = 4
PER_STEP = 3


def indices(elements: list[dict[str, Any]]) -> list[int]:
    return [index for e in elements for index in (s["index"] for s in e["sources"])]


def logged(folder: Path, rank: int, step: int) -> list[int]:
    return indices(service.logged_lineage(folder, rank, step, PIPELINE))


def test_every_step_of_every_rank_names_what_it_got_across_a_restore(cluster, tmp_path):
    """Saved at step 10, read on to step 14, restored on 3 ranks from step 10."""
    shared = cluster(num_workers=2)
    R, name = 2, fresh("log")
    saves: list[bytes] = [b""] * R

    def before(r: int, opened: Opened) -> dict[int, list[int]]:
        it = opened(
            rank_dataset(shared.target, PIPELINE, R, r, name, SEED).batch(PER_STEP)
        )
        got = {}
        with service.LineageLog(tmp_path, r) as log:
            for step in range(15):
                got[step] = next(it).tolist()
                log.record(step, it)
                if step == 9:
                    saves[r] = it.save()
        return got

    first = on_ranks(R, before)
    merged = service.merge_positions(saves)
    R2, name2 = 3, fresh("log-restored")

    def after(r: int, opened: Opened) -> dict[int, list[int]]:
        ds = rank_dataset(shared.target, PIPELINE, R2, r, name2, SEED).batch(PER_STEP)
        it = opened(ds)
        it.restore(merged)
        got = {}
        with service.LineageLog(tmp_path, r) as log:
            for step, batch in enumerate(it, start=10):
                got[step] = batch.tolist()
                log.record(step, it)
        return got

    second = on_ranks(R2, after)
    for r in range(R):
        for step in range(10):
            assert logged(tmp_path, r, step) == first[r][step]
    for r in range(R2):
        assert second[r]  # every new rank read
        for step, got in second[r].items():
            assert logged(tmp_path, r, step) == got  # the restored run's, not the first
    taken = [i for r in range(R) for step in range(10) for i in first[r][step]]
    taken += [i for r in range(R2) for batch in second[r].values() for i in batch]
    assert len(taken) == len(set(taken)) == 60 + 440 // R2 * R2  # each once


def test_a_step_across_an_epochs_end_names_both_epochs(cluster, tmp_path):
    shared = cluster()
    ds = rank_dataset(shared.target, zd.Dataset.range(10), 1, 0, fresh("ep"), SEED)
    with service.LineageLog(tmp_path, 0, flush_every=2) as log:
        it = iter(ds.repeat(2).batch(PER_STEP))
        got = []
        for step, batch in enumerate(it):
            got.append(batch.tolist())
            log.record(step, it)
    assert len(got[3]) == PER_STEP  # elements 9 of epoch 0, 0 and 1 of epoch 1
    epochs = [
        e["epoch"] for e in service.logged_lineage(tmp_path, 0, 3, zd.Dataset.range(10))
    ]
    assert epochs == [0, 1, 1]
    for step, batch in enumerate(got):
        assert (
            indices(service.logged_lineage(tmp_path, 0, step, zd.Dataset.range(10)))
            == batch
        )


def test_a_torn_row_is_cut_off_and_the_log_goes_on(cluster, tmp_path):
    shared = cluster()
    ds = rank_dataset(shared.target, PIPELINE, 1, 0, fresh("torn"), SEED).batch(2)
    it = iter(ds)
    with service.LineageLog(tmp_path, 0) as log:
        for step in range(3):
            next(it)
            log.record(step, it)
    with open(tmp_path / "rank0.consumed", "ab") as torn:
        torn.write(b"\x01\x02\x03")  # a crash in the middle of a write
    with service.LineageLog(tmp_path, 0) as log:  # the same read goes on
        batch = next(it)
        log.record(3, it)
    it.close()
    assert logged(tmp_path, 0, 3) == batch.tolist()
    assert np.fromfile(tmp_path / "rank0.step", dtype="<i8").tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="step 4 of rank 0 is not in the log"):
        logged(tmp_path, 0, 4)
