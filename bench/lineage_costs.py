"""What lineage costs: a lookup in a large dataset, and the per-step log while reading.

    python -m bench.lineage_costs            # the figures in docs/accountable.md
    python -m bench.lineage_costs --quick    # a smoke run

* ``lookup``: milliseconds for ``service.lineage`` of one step (every rank's
  element) of ``range(10_000_000).map(f)``, with how many elements ``f`` ran
  on (one split's at most: the counts before it fold).
* ``log``: one rank reads a multi-rank job through an in-process dispatcher
  and worker, ``batch(per_step)`` after ``distribute``, in blocks of steps
  without and with a ``LineageLog`` recording each step (``log``): the
  overhead on the read's time, the time in ``record``, the log's bytes per
  million steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

WORKLOADS = {
    "scalars": (lambda i: i, 64),
    "token rows": (lambda i: np.full(2048, i, dtype=np.int32), 8),
}
"""Elements made per source index, and elements per step: the cheapest read
(a step of 64 scalars) and a language model's (8 rows of 2,048 tokens)."""


def lookup(
    elements: int = 10_000_000, ranks: int = 8, repeats: int = 5
) -> dict[str, Any]:
    """Milliseconds for one step's lineage (median), and the map calls it made."""
    calls = [0]

    def times_three(x: Any) -> Any:
        calls[0] += 1
        return x * 3

    ds = zd.Dataset.range(elements).map(times_three)
    step = elements // ranks // 2
    took = []
    for _ in range(repeats):
        calls[0] = 0
        start = time.perf_counter()
        service.lineage(ds, 1234, ranks, step * ranks, (step + 1) * ranks)
        took.append((time.perf_counter() - start) * 1e3)
    return {"elements": elements, "ms": statistics.median(took), "map_calls": calls[0]}


def log(workload: str, steps: int, block: int = 250) -> dict[str, Any]:
    """The log's cost and size over ``steps`` steps of one rank's read.

    The read alternates blocks of ``block`` steps without and with a
    ``record`` per step, so that both see the same load (this host's is
    shared): ``overhead_pct`` compares their median times a step (noisy
    here); ``record_us`` is the CPU time ``record`` takes (this thread's:
    not the waits for the GIL, which the reader's thread holds meanwhile),
    ``record_pct`` that over the read's time.
    """
    make, per_step = WORKLOADS[workload]
    pipeline = zd.Dataset.range(steps * per_step + per_step).map(make)
    plain: list[float] = []
    logged: list[float] = []
    spent = 0.0
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        tempfile.TemporaryDirectory() as folder,
    ):
        read = pipeline.apply(
            service.distribute(
                "distributed_epoch", dispatcher.target, job_name="log",
                num_consumers=1, consumer_index=0, seed=1,
            )
        ).batch(per_step)  # fmt: skip
        it = iter(read)
        next(it)  # the job started, the workers busy
        with service.LineageLog(folder, 0) as lineage_log:
            for first in range(0, steps, block):
                with_log = first // block % 2 == 1
                start = time.perf_counter()
                for step in range(first, first + block):
                    next(it)
                    if with_log:
                        before = time.thread_time()
                        lineage_log.record(step, it)
                        spent += time.thread_time() - before
                took = (time.perf_counter() - start) / block * 1e6
                (logged if with_log else plain).append(took)
        it.close()
        size = sum(p.stat().st_size for p in Path(folder).iterdir())
    read_us, with_log_us = statistics.median(plain), statistics.median(logged)
    record_us = spent / (len(logged) * block) * 1e6
    return {
        "workload": workload,
        "steps": steps,
        "read_us_per_step": read_us,
        "logged_us_per_step": with_log_us,
        "overhead_pct": 100 * (with_log_us - read_us) / read_us,
        "record_us": record_us,
        "record_pct": 100 * record_us / read_us,
        "mb_per_million_steps": size / (len(logged) * block),  # bytes a step
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="A smoke run.")
    args = parser.parse_args()
    steps = 500 if args.quick else 40_000
    figures = {
        "lookup": lookup(100_000 if args.quick else 10_000_000),
        "log": [log(name, steps) for name in WORKLOADS],
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
