"""DDP: a gathered checkpoint with steps skipped (``zmqdata.torch.skip_steps``) resumes exactly.

Real ``torch.distributed`` (gloo) rank processes (``tests/ranks.py``) read a
seeded multi-rank job of batches through ``zmqdata.torch.IterableDataset``,
with an ``all_reduce`` every step. Two ranks read the epoch to its end,
checkpointing with ``gather_state_dict`` at step ``SAVE_AT``; three ranks load
that checkpoint with the next ``SKIP`` steps skipped: together they read the
two-rank run's global order from step ``SAVE_AT + SKIP`` on, in equal steps,
and none of the skipped batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.ranks import Ranks, ddp_steps
from tests.service.cluster import Cluster
from zmqdata import service

torch = pytest.importorskip("torch")

import zmqdata.torch as zt  # after the skip: needs torch

ELEMENTS, BATCH, SEED = 2_400, 8, 11
SAVE_AT, SKIP = 20, 7


ENTRY = "tests.test_torch_skip:rank_main"
"""Each rank runs ``rank_main``."""


def rank_main(config: dict[str, Any]) -> None:
    """One DDP rank: writes ``rank{r}.stream`` (a step's batch a line) and ``rank{r}.json``."""
    rank, world_size = config["rank"], config["world_size"]
    out = Path(config["out"])
    distributed = torch.distributed
    distributed.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=30)
    )
    ds = (
        zd.Dataset.range(ELEMENTS)
        .batch(BATCH)
        .apply(
            service.distribute(
                "distributed_epoch", config["target"], job_name=config["job"], seed=SEED
            )
        )
    )
    source = zt.IterableDataset(ds)
    if config.get("resume"):
        checkpoint = torch.load(config["resume"])
        source.load_state_dict(zt.skip_steps(checkpoint, config["skip"]))
    step, _ = ddp_steps(
        source, config, lambda step, batch: ",".join(map(str, batch.tolist()))
    )
    (out / f"rank{rank}.json").write_text(json.dumps({"steps": step}))
    distributed.destroy_process_group()


def global_order(ranks: Ranks) -> list[str]:
    """The run's batches step by step, rank by rank (the job's global order)."""
    streams = [
        (ranks.out / f"rank{r}.stream").read_text().splitlines()
        for r in range(ranks.world_size)
    ]
    assert len({len(s) for s in streams}) == 1  # equal steps on every rank
    return [batch for step in zip(*streams, strict=True) for batch in step]


@pytest.mark.timeout(60)
def test_skipped_steps_of_a_ddp_checkpoint_never_come_and_the_rest_follows(
    cluster: Callable[..., Cluster],
    ddp_run: Callable[..., Ranks],
    tmp_path: Path,
) -> None:
    target = cluster(num_workers=2).target
    first = ddp_run(
        tmp_path / "first", 2, ENTRY, target=target, job="skip-first", save_at=SAVE_AT
    )
    resumed = ddp_run(
        tmp_path / "resumed", 3, ENTRY, target=target, job="skip-resumed",
        resume=str(first.out / "checkpoint.pt"), skip=SKIP,
    )  # fmt: skip
    reference, after = global_order(first), global_order(resumed)
    start = 2 * (SAVE_AT + SKIP)
    assert after == reference[start : start + len(after)]
    assert len(reference) - start - len(after) < 3  # a last incomplete round
    assert not set(reference[2 * SAVE_AT : start]) & set(after)
