"""Coordinated reads for synchronous training: similar-length batches per step.

With data parallelism every replica waits for the slowest one at each step. If
replica 0 gets a batch of short sequences and replica 1 a batch of long ones,
replica 0 idles. Coordinated reads fix that: consumers read in rounds, and all
elements of a round come from one worker's stream, consecutively. Bucket by
length on the workers, so consecutive batches have similar lengths, and every
replica's batch at step ``k`` comes from the same bucket.

Run with ``python examples/bucketing.py``.
"""

from __future__ import annotations

import threading

import numpy as np

import zmqdata as zd
from zmqdata import service

REPLICAS, BATCH, STEPS = 2, 4, 6


def sentences(seed: int = 0):
    """An endless stream of token sequences of random lengths 1..64."""
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(1, 1000, size=int(rng.integers(1, 65)), dtype=np.int32)


def pipeline() -> zd.Dataset:
    """Batches of similar lengths, ``REPLICAS`` in a row from one length bucket.

    Runs on the workers. ``bucket_by_sequence_length`` pads each bucket's
    ``BATCH * REPLICAS`` sequences to one length; ``unbatch().batch(BATCH)``
    deals that out as ``REPLICAS`` consecutive batches. A round is
    ``REPLICAS`` consecutive elements, so each round's batches come from one
    bucket, padded alike.
    """
    return (
        zd.Dataset.from_generator(sentences)
        .bucket_by_sequence_length(
            len,
            bucket_boundaries=[16, 32, 48],
            bucket_batch_sizes=[BATCH * REPLICAS] * 4,
        )
        .unbatch()
        .batch(BATCH)
    )


def main() -> None:
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
    ):
        widths: list[list[int]] = [[] for _ in range(REPLICAS)]

        def replica(index: int) -> None:
            ds = pipeline().apply(
                service.distribute(
                    "parallel_epochs",
                    dispatcher.target,
                    job_name="bucketing",
                    consumer_index=index,
                    num_consumers=REPLICAS,
                )
            )
            with iter(ds) as batches:
                for _ in range(STEPS):
                    widths[index].append(next(batches).shape[1])

        threads = [threading.Thread(target=replica, args=(i,)) for i in range(REPLICAS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for step in range(STEPS):
        row = [widths[r][step] for r in range(REPLICAS)]
        print(f"step {step}: padded lengths per replica {row}")


if __name__ == "__main__":
    main()
