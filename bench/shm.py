"""Same-host reads: shared memory vs tcp loopback, trainer CPU and elements/s.

Two worker processes on this host serve ``distributed_epoch`` batches of
64x112x112x3 float32 (9.6 MB); the trainer (this process) only iterates. Each
repeat reads one epoch with shared memory (the default) and one over tcp
(``ZMQDATA_SHARED_MEMORY=0`` for the reader), in alternation, on the same
workers; medians are printed, with the trainer's CPU seconds
(``time.process_time``: every thread of this process) per 1,000 elements.
``--touch``: the trainer also reads one value per 4 KiB page of every batch.

    flock /tmp/zmqdata-bench.lock .venv/bin/python bench/shm.py [--batches 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zmqdata as zd
from bench.common import Bench, Stat, cluster, distributed

SHAPE = (64, 112, 112, 3)


def batch(i: Any) -> np.ndarray[Any, Any]:
    """One batch, its first value the batch index (checked by the reader)."""
    out = np.empty(SHAPE, np.float32)
    out.fill(float(i))
    return out


def epoch(
    target: str, batches: int, shared: bool, touch: bool = False
) -> tuple[float, float]:
    """Reads one epoch; returns (trainer CPU s per 1,000 elements, elements/s)."""
    os.environ["ZMQDATA_SHARED_MEMORY"] = "1" if shared else "0"
    ds = distributed(
        zd.Dataset.range(batches).map(batch),
        target,
        processing_mode="distributed_epoch",
        compression=None,
        data_transfer_protocol="tcp",
    )
    seen = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for element in ds:
        seen += element.shape[0]
        if touch:
            element.reshape(-1)[::1024].sum()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if seen != batches * SHAPE[0]:
        raise RuntimeError(f"read {seen} elements, expected {batches * SHAPE[0]}")
    return cpu / seen * 1000, seen / wall


def shared_memory(bench: Bench, batches: int = 150) -> dict[str, Any]:
    """The bench/run.py section: shared memory vs tcp, medians of ``bench.repeats``."""
    batches = 30 if bench.quick else batches
    runs: dict[str, list[tuple[float, float]]] = {"shm": [], "tcp": []}
    with cluster(2) as target:
        epoch(target, 20, shared=True)  # warm up both workers
        for _ in range(bench.repeats):
            for name, done in runs.items():
                done.append(epoch(target, batches, name == "shm"))
    os.environ.pop("ZMQDATA_SHARED_MEMORY", None)
    return {
        "batches": batches,
        **{
            name: {
                "cpu_s_per_1k": Stat(run[0] for run in done),
                "el_s": Stat(run[1] for run in done),
            }
            for name, done in runs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--touch", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"shm": [], "tcp": []}
    with cluster(2) as target:
        epoch(target, 20, shared=True)  # warm up both workers
        for _ in range(args.repeats):
            for name, runs in results.items():
                runs.append(epoch(target, args.batches, name == "shm", args.touch))
    print(
        f"touch={args.touch}: {args.batches} batches of {SHAPE} float32, 2 worker processes, "
        f"median of {args.repeats}"
    )
    print("| path | elements/s | trainer CPU s per 1,000 elements |")
    print("|---|---|---|")
    for name, runs in results.items():
        cpu = statistics.median(run[0] for run in runs)
        rate = statistics.median(run[1] for run in runs)
        print(f"| {name} | {rate:,.0f} | {cpu:.4f} |")


if __name__ == "__main__":
    main()
