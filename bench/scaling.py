"""Scaling: workers, client CPU per element, client memory, element size.

Not a script: ``python bench/run.py --only scaling,cpu,memory,sweep`` runs
these sections.

* ``workers``: the W4 CPU-bound pipeline with 1, 2, 4 worker processes (a fresh
  cluster each; figures shared with W4).
* ``client_cpu``: CPU time of a consumer process per element, for a few element
  sizes and two element counts each (bench/consumer.py, fresh processes).
* ``client_memory``: peak RSS growth of a consumer process reading 4 MiB
  elements with ``max_outstanding_requests`` in {1, 4, 16}, against element
  size x max_outstanding_requests (one fresh process per measurement).
* ``size_sweep``: throughput against element size, zmqdata (compression=None)
  and raw pyzmq PUSH/PULL of the same bytes (figures shared with W3).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import raw
from bench.anchors import MEMORY_CONSTANT_MIB, MIB
from bench.common import Bench, Stat, subprocess_env, transport
from bench.workloads import cpu_el_s, cpu_pipeline, transfer_mb_s

CONSUMER = str(Path(__file__).resolve().parent / "consumer.py")


def workers(bench: Bench) -> dict[str, Any]:
    counts = bench.sizes.scaling_workers
    rates = {str(n): cpu_el_s(bench, n) for n in counts}
    one = rates[str(counts[0])]
    return {
        "elements": bench.sizes.w4_elements,
        "cpu_ms_per_element": cpu_pipeline(bench)[2],
        "workers_el_s": rates,
        "speedup": {n: rate / one for n, rate in rates.items()},
    }


def consume(bench: Bench, size: int, count: int, *flags: str) -> dict[str, Any]:
    """Runs bench/consumer.py against the shared cluster; its JSON result."""
    command = [sys.executable, CONSUMER, bench.target(), "--size", str(size)]
    done = subprocess.run(
        [*command, "--count", str(count), *flags],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"consumer {size=} {count=} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def client_cpu(bench: Bench) -> dict[str, Any]:
    points = []
    for size in bench.sizes.cpu_sizes:
        full = bench.sizes.count_for(size)
        for count in sorted({max(bench.sizes.min_count, full // 8), full}):
            reads = consume(bench, size, count, "--reads", str(bench.repeats + 1))
            cpu = Stat(reads["cpu_s"][1:]).scaled(1e6 / count)  # first read warms up
            points.append(
                {
                    "size": size,
                    "count": count,
                    "cpu_us_per_element": cpu,
                    "cpu_ns_per_byte": cpu.scaled(1000 / size),
                    "el_s": count / statistics.median(reads["wall_s"][1:]),
                }
            )
    return {"compression": None, "points": points}


def client_memory(bench: Bench) -> dict[str, Any]:
    """Peak RSS growth of a consumer process over tcp (over shared memory the
    elements are mappings of ``/dev/shm``, not the consumer's own memory)."""
    size, count = bench.sizes.memory_size, bench.sizes.memory_count
    points = []
    for outstanding in bench.sizes.memory_outstanding:
        with transport("tcp"):
            samples = [
                consume(
                    bench,
                    size,
                    count,
                    "--memory",
                    "--max-outstanding",
                    str(outstanding),
                )["peak_growth_mib"]
                for _ in range(min(bench.repeats, 3))
            ]
        window = size * outstanding / MIB
        points.append(
            {
                "max_outstanding_requests": outstanding,
                "peak_growth_mib": Stat(samples),
                "window_mib": window,
                "allowed_mib": window + MEMORY_CONSTANT_MIB,
            }
        )
    return {"size": size, "count": count, "points": points}


def size_sweep(bench: Bench) -> dict[str, Any]:
    return {
        "points": [
            {
                "size": size,
                "count": bench.sizes.count_for(size),
                "zmqdata_mb_s": transfer_mb_s(bench, size, None),
                "raw_mb_s": raw.push_pull_mb_s(bench, size),
            }
            for size in bench.sizes.sweep_sizes
        ]
    }
