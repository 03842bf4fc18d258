"""The anchor workloads W1-W6 of shared/ANCHORS.md, each with its same-run baselines.

Not a script: ``python bench/run.py --only W1,W3`` runs some of them. Each
``wN(bench)`` returns a dict of figures (medians of ``bench.repeats`` runs);
bench/report.py turns them into table rows. The dispatcher runs in the
benchmark process, workers as separate processes (``common.cluster``);
consumers run in the benchmark process.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import time
from typing import Any

import numpy as np

import zmqdata as zd
from bench import raw
from bench.common import (
    KIB,
    Bench,
    Stat,
    cluster,
    coordinated_rate,
    distributed,
    drain,
    latency_passes,
    per_second,
    transport,
)


def w1_tiny_scalars(bench: Bench) -> dict[str, Any]:
    """200k int64 scalars, 1 worker, against the local pipeline and raw 8 B msgs."""
    n = bench.sizes.w1_elements
    ds = zd.Dataset.range(n)
    remote = distributed(ds, bench.target())
    return {
        "elements": n,
        "zmqdata_el_s": bench.measure(per_second(n, lambda: drain(remote, n))),
        "local_el_s": bench.measure(per_second(n, lambda: drain(ds, n))),
        "raw_8B_msgs_s": raw.push_pull_msgs_s(bench, 8),
    }


def w2_batched_ints(bench: Bench) -> dict[str, Any]:
    """range(N).batch(1024): batching on the worker, int64[1024] on the wire.

    Passes are long at the anchor size (tens of seconds), so this warms up on
    a few batches and takes at most 3 repetitions.
    """
    n, size = bench.sizes.w2_elements, bench.sizes.w2_batch
    batches = math.ceil(n / size)
    ds = zd.Dataset.range(n).batch(size)
    remote = distributed(ds, bench.target())
    repeats = min(bench.repeats, 3)

    def figure(dataset: zd.Dataset) -> Stat:
        def warmup() -> None:
            with iter(dataset) as iterator:
                drain(itertools.islice(iterator, 20))

        return bench.measure(
            per_second(batches, lambda: drain(dataset, batches)), warmup, repeats
        )

    return {
        "elements": n,
        "batch": size,
        "batches": batches,
        "repeats": repeats,
        "zmqdata_batches_s": figure(remote),
        "local_batches_s": figure(ds),
        "raw_msgs_s": raw.push_pull_msgs_s(bench, size * 8),
        "raw_message_bytes": size * 8,
    }


def noise(size: int) -> np.ndarray[Any, Any]:
    """``size`` bytes of float32 noise (incompressible: AUTO sends it raw)."""
    return np.random.default_rng(0).standard_normal(size // 4, dtype=np.float32)


@functools.cache
def _noise_here(size: int) -> np.ndarray[Any, Any]:
    return noise(size)


def made_noise(index: Any, size: int) -> np.ndarray[Any, Any]:
    """``noise(size)``, made once per worker process: a pipeline that carries no data."""
    return _noise_here(size)


def transfer_mb_s(
    bench: Bench,
    size: int,
    compression: str | None,
    path: str = "tcp",
    made: bool = False,
) -> Stat:
    """MB/s of ``size``-byte float32 tensors from the shared worker to this
    process, over ``path`` (see ``common.transport``). The tensor is a
    constant of the pipeline (``from_tensors``: it travels with the pipeline
    to the dispatcher and the worker at every pass), or ``made`` on the worker."""

    def compute() -> Stat:
        count = bench.sizes.count_for(size)
        if made:
            ds = zd.Dataset.range(count).map(functools.partial(made_noise, size=size))
        else:
            ds = zd.Dataset.from_tensors(noise(size)).repeat(count)
        remote = distributed(ds, bench.target(), compression=compression)
        with transport(path):
            return bench.measure(
                per_second(count * size / 1e6, lambda: drain(remote, count))
            )

    return bench.memo(("zmqdata", size, compression, path, made), compute)


W3_CASES = ((None, "tcp", False), ("AUTO", "tcp", False), (None, "shm", False))
"""(compression, path, made): tcp is the transport against raw pyzmq tcp; shm
is what a trainer on the workers' host gets by default; ``made``: the tensor
is made on the worker (W3 proper ships it in the pipeline at every pass)."""
W3_MADE_CASES = ((None, "tcp", True),)
"""Run for the largest size only: where the pipeline's tensor costs most."""


def w3_big_tensors(bench: Bench) -> dict[str, Any]:
    """4 MiB and 64 MiB float32 tensors, with and without compression, over tcp
    and over same-host shared memory, against raw pyzmq zero-copy PUSH/PULL of
    the same bytes and memcpy."""
    cases = {}
    largest = max(bench.sizes.w3_sizes)
    for size in bench.sizes.w3_sizes:
        for compression, path, made in W3_CASES + (
            W3_MADE_CASES if size == largest else ()
        ):
            cases[f"{size}/{compression}/{path}{'/made' if made else ''}"] = {
                "size": size,
                "compression": compression,
                "path": path,
                "made": made,
                "count": bench.sizes.count_for(size),
                "zmqdata_mb_s": transfer_mb_s(bench, size, compression, path, made),
                "raw_mb_s": raw.push_pull_mb_s(bench, size),
                "memcpy_mb_s": raw.memcpy_mb_s(bench, size),
            }
    return {"cases": cases}


# ------------------------------------------------------------------ W4: CPU-bound

_CHUNK = bytes(64 * KIB)


def burn(x: Any, rounds: int) -> Any:
    """``rounds`` x 64 KiB of SHA-256 (CPU work that holds a core); returns ``x``."""
    digest = hashlib.sha256()
    for _ in range(rounds):
        digest.update(_CHUNK)
    return x


def _calibrate(cpu_ms: float, probe: int = 50) -> int:
    """SHA-256 rounds that take ``cpu_ms`` of CPU here (best of 5 probes)."""
    best = math.inf
    for _ in range(5):
        start = time.thread_time()
        burn(0, probe)
        best = min(best, time.thread_time() - start)
    return max(1, round(probe * cpu_ms / 1000 / best))


def cpu_pipeline(bench: Bench) -> tuple[zd.Dataset, int, float]:
    """range(N).map(~5 ms of CPU), its SHA-256 rounds and their measured CPU ms."""

    def compute() -> tuple[zd.Dataset, int, float]:
        rounds = _calibrate(bench.sizes.w4_cpu_ms)
        start = time.thread_time()
        burn(0, rounds)
        cpu_ms = (time.thread_time() - start) * 1000
        fn = functools.partial(burn, rounds=rounds)
        return zd.Dataset.range(bench.sizes.w4_elements).map(fn), rounds, cpu_ms

    return bench.memo("cpu pipeline", compute)


def cpu_el_s(bench: Bench, workers: int) -> Stat:
    """Elements/s of the CPU-bound pipeline, ``distributed_epoch`` over a fresh
    cluster of ``workers`` worker processes."""

    def compute() -> Stat:
        ds, _, _ = cpu_pipeline(bench)
        n = bench.sizes.w4_elements
        with cluster(workers) as target:
            remote = distributed(ds, target, processing_mode="distributed_epoch")
            return bench.measure(per_second(n, lambda: drain(remote, n)))

    return bench.memo(("cpu", workers), compute)


def w4_cpu_heavy(bench: Bench) -> dict[str, Any]:
    """~5 ms of CPU per element, 1 and 2 workers: the 2-vs-1 speedup."""
    ds, rounds, cpu_ms = cpu_pipeline(bench)
    n = bench.sizes.w4_elements
    one, two = cpu_el_s(bench, 1), cpu_el_s(bench, 2)
    return {
        "elements": n,
        "sha256_rounds": rounds,
        "cpu_ms_per_element": cpu_ms,
        "local_el_s": bench.memo(
            "cpu local", lambda: bench.measure(per_second(n, lambda: drain(ds, n)))
        ),
        "workers_el_s": {"1": one, "2": two},
        "speedup": two / one,
    }


# ------------------------------------------------------------------ W5, W6


def w5_latency(bench: Bench) -> dict[str, Any]:
    """range(10): iterator created -> first element, and -> end of input."""
    ds = distributed(zd.Dataset.range(10), bench.target())
    first, end = latency_passes(ds, bench.repeats * 4, 9)
    return {
        "first_ms": first,
        "end_ms": end,
        "round_trip_us": raw.round_trip_us(bench),
    }


def w6_coordinated(bench: Bench) -> dict[str, Any]:
    """Coordinated reads: two consumers (threads here) in strict rounds, 1 worker."""
    consumers, rounds = 2, bench.sizes.w6_rounds

    def make(index: int, name: str) -> zd.Dataset:
        return distributed(
            zd.Dataset.range(1 << 62).repeat(),
            bench.target(),
            job_name=name,
            consumer_index=index,
            num_consumers=consumers,
        )

    once = coordinated_rate(make, consumers, rounds)
    return {
        "consumers": consumers,
        "rounds": rounds,
        "zmqdata_el_s": bench.measure(once),
        "raw_8B_msgs_s": raw.push_pull_msgs_s(bench, 8),
    }
