"""The loss-spike recipe: go back to a checkpoint, skip the batches that made the spike, resume.

Two ranks (threads here, DDP ranks in a real run) read one multi-rank job
(``distributed_epoch`` with ``num_consumers``, ``consumer_index`` and a
``seed``): its order is a function of the dataset, the seed and the number of
ranks alone. Each step every rank takes one batch. Every ``SAVE_EVERY`` steps
the ranks save their positions, merged into the job's (``merge_positions``):
the checkpoint. At step ``SPIKE_AT`` the loss spikes (simulated), so the run
goes back to the last checkpoint before it and skips the ``SKIP`` steps
after it (``advance_position``): PaLM's recipe. The resumed run, here on
three ranks, reads exactly what the uninterrupted run would have read after
the skipped steps, and never the skipped batches.
Run with ``python examples/loss_spike.py``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

EXAMPLES, BATCH, SEED = 4_096, 16, 7
SAVE_EVERY, SPIKE_AT, SKIP = 20, 47, 12


def batches() -> zd.Dataset:
    """Batches of example ids (a real pipeline would decode and tokenize)."""
    return zd.Dataset.range(EXAMPLES).map(lambda i: i * 1).batch(BATCH)


def on_ranks(ranks: int, body: Any) -> list[Any]:
    """``body(rank)`` on one thread per rank (one process per rank in a real run)."""
    results: list[Any] = [None] * ranks

    def run(rank: int) -> None:
        results[rank] = body(rank)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def read(
    dispatcher: str, job: str, ranks: int, steps: int | None, state: Any = None
) -> Any:
    """Every rank's batches, ``steps`` of them (all: None), and its position after them."""

    def rank_read(rank: int) -> tuple[list[np.ndarray], bytes | None]:
        ds = batches().apply(
            service.distribute(
                "distributed_epoch", dispatcher, job_name=job,
                num_consumers=ranks, consumer_index=rank, seed=SEED,
            )
        )  # fmt: skip
        with iter(ds) as iterator:
            if state is not None:
                iterator.restore(state)
            taken = []
            for batch in iterator:
                taken.append(batch)
                if steps is not None and len(taken) == steps:
                    return taken, iterator.save()
            return taken, None

    return on_ranks(ranks, rank_read)


def global_order(per_rank: list[list[np.ndarray]]) -> list[tuple[int, ...]]:
    """The batches in the job's global order: step by step, rank by rank."""
    return [tuple(b.tolist()) for step in zip(*per_rank, strict=False) for b in step]


def main() -> None:
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
    ):
        # The reference: the run without a spike, read to its end.
        reference = global_order(
            [b for b, _ in read(dispatcher.target, "reference", 2, None)]
        )

        # The run: checkpoints every SAVE_EVERY steps; the loss spikes at SPIKE_AT.
        saved_at = SPIKE_AT // SAVE_EVERY * SAVE_EVERY
        run = read(dispatcher.target, "run", 2, saved_at)
        checkpoint = service.merge_positions([position for _, position in run])
        print(
            f"loss spike at step {SPIKE_AT}: back to the checkpoint of step {saved_at}"
        )

        # Skip the SKIP steps after the checkpoint (2 ranks: 2 batches a step).
        skipped = service.advance_position(checkpoint, SKIP * 2)
        resumed = read(dispatcher.target, "resumed", 3, None, skipped)
        order = global_order([b for b, _ in resumed])
        print(f"skipped steps {saved_at + 1}..{saved_at + SKIP}; resumed on 3 ranks")

        first = 2 * (saved_at + SKIP)
        skipped_batches = set(reference[2 * saved_at : first])
        same = order == reference[first : first + len(order)]
        ok = same and not skipped_batches & set(order)
        print(
            "the resumed run reads what the run would have read after them: "
            + ("OK" if ok else "WRONG")
        )
        print(
            f"{len(skipped_batches)} batches skipped, {len(order)} read after the resume"
        )


if __name__ == "__main__":
    main()
