"""DDP over a mixture of multi-rank reads, resumed on other ranks with new weights.

Real ``torch.distributed`` (gloo) rank processes (forked by ``tests/ranks.py``)
read a Parquet and a TFRecord source through the service, each a multi-rank
read that ``zmqdata.torch.IterableDataset`` fills in, mixed by
``sample_from_datasets`` in the trainer, with an ``all_reduce`` every step.
Two ranks checkpoint with ``gather_state_dict`` at step ``SAVE_AT`` and read
on; three ranks load the checkpoint with new weights. Across the two runs no
element comes twice, none is missing but a last incomplete round of each
source, every rank of a run takes the same steps, the new weights apply.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.ranks import Ranks, ddp_steps
from tests.service.cluster import Cluster
from tests.service.test_reweight_service import (
    BATCH,
    FIRST_RECORD,
    NEW_WEIGHTS,
    RECORDS,
    ROWS,
    SAVED_WEIGHTS,
    from_records,
    mixture,
    write_sources,
)

torch = pytest.importorskip("torch")

import zmqdata.torch as zt  # after the skip: needs torch

SAVE_AT, READ_ON = 30, 3
"""The first run checkpoints at step 30 and reads 3 more steps (they come again)."""


ENTRY = "tests.test_torch_reweight:rank_main"
"""Each rank runs ``rank_main``."""


def rank_main(config: dict[str, Any]) -> None:
    """One DDP rank: writes ``rank{r}.stream`` (a step's elements a line), ``rank{r}.json``.

    ``config``: target, files, weights, job, out; save_at (``gather_state_dict``
    there, rank 0 writes ``checkpoint.pt``) and stop_at, or resume (a
    checkpoint to ``load_state_dict``).
    """
    rank, world_size = config["rank"], config["world_size"]
    out = Path(config["out"])
    distributed = torch.distributed
    distributed.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=30)
    )
    files = tuple(config["files"])
    ds = mixture(config["target"], files, config["weights"], config["job"])
    source = zt.IterableDataset(ds)
    if config.get("resume"):
        source.load_state_dict(torch.load(config["resume"]))
    step, equal = ddp_steps(
        source,
        config,
        lambda step, batch: f"{step}: {','.join(map(str, batch.tolist()))}",
    )
    (out / f"rank{rank}.json").write_text(json.dumps({"steps": step, "equal": equal}))
    distributed.destroy_process_group()


def steps_of(ranks: Ranks) -> list[dict[int, list[int]]]:
    """Each rank's elements per step."""
    streams = []
    for r in range(ranks.world_size):
        lines = (ranks.out / f"rank{r}.stream").read_text().splitlines()
        parts = (line.partition(": ") for line in lines)
        streams.append({int(s): [int(v) for v in xs.split(",")] for s, _, xs in parts})
    return streams


@pytest.mark.timeout(60)
def test_a_gathered_checkpoint_resumes_on_three_ranks_with_new_weights(
    cluster: Callable[..., Cluster],
    ddp_run: Callable[..., Ranks],
    tmp_path: Path,
) -> None:
    sources = {
        "target": cluster(num_workers=2).target,
        "files": write_sources(tmp_path),
    }
    first = ddp_run(
        tmp_path / "first", 2, ENTRY, **sources, weights=SAVED_WEIGHTS, job="ddp-first",
        save_at=SAVE_AT, stop_at=SAVE_AT + READ_ON,
    )  # fmt: skip
    checkpoint = str(first.out / "checkpoint.pt")
    resumed = ddp_run(
        tmp_path / "resumed", 3, ENTRY, **sources, weights=NEW_WEIGHTS, job="ddp-resumed",
        resume=checkpoint,
    )  # fmt: skip
    steps = {json.loads((resumed.out / f"rank{r}.json").read_text())["steps"]
             for r in range(3)}  # fmt: skip
    assert len(steps) == 1  # equal steps on every rank
    prefix = [x for s in steps_of(first) for k in range(1, SAVE_AT + 1) for x in s[k]]
    after = [[x for k in sorted(s) for x in s[k]] for s in steps_of(resumed)]
    counts = Counter(prefix + [x for part in after for x in part])
    assert max(counts.values()) == 1  # nothing came twice
    everything = {*range(ROWS), *range(FIRST_RECORD, FIRST_RECORD + RECORDS)}
    assert set(counts) <= everything
    missing = everything - set(counts)  # a last incomplete round of each, at most
    assert sum(x < FIRST_RECORD for x in missing) < 3
    assert sum(x >= FIRST_RECORD for x in missing) < 3
    assert len(prefix) == 2 * SAVE_AT * BATCH
    assert from_records(prefix) == pytest.approx(0.3, abs=0.1)
    assert from_records(after[0][:100]) == pytest.approx(0.8, abs=0.1)
