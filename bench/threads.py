"""Native thread pools: a numpy-heavy map on 1 and 2 worker processes.

Each element runs 200 matmuls of 128x128 float32 (~7 ms on one core). Workers
are started as users start them, with none of the thread environment
variables set: ``python -m zmqdata worker`` once with the default ``--threads
auto`` and once with ``--threads none`` (the pools as wide as the machine: the
behaviour before workers limited them), and from a script as tf.data users
start theirs (``WorkerServer(WorkerConfig(dispatcher)).join()``, defaults);
one worker with ``--threads 1`` as a reference. A section for bench/run.py::

    SECTIONS["threads"] = threads.numpy_workers

or on its own: ``python bench/threads.py [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench.common import (
    Bench,
    Stat,
    distributed,
    drain,
    per_second,
    serving,
    sizes_for,
    subprocess_env,
)
from zmqdata import service
from zmqdata._runtime.threads import ENV_VARS

MATMULS, SIDE = 200, 128
LABELS = {"auto": None, "api": "api", "none": "none"}
"""Row label -> how the workers start (``workers``)."""


def matmuls(index: Any) -> np.ndarray[Any, Any]:
    """``MATMULS`` products of ``SIDE`` x ``SIDE`` float32 matrices; a 4-byte result."""
    rng = np.random.default_rng(int(index))
    a = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
    # Scaled to keep the products' size: values that shrink 11x a product
    # reach the denormal range within 40 of them, where this machine's CPU
    # computes ~6x slower (not what a user's numpy map does).
    b = rng.standard_normal((SIDE, SIDE), dtype=np.float32) / np.float32(np.sqrt(SIDE))
    for _ in range(MATMULS):
        a = a @ b
    return np.float32(a[0, 0])


API_WORKER = (
    "import sys\n"
    "from zmqdata import service\n"
    "service.WorkerServer(service.WorkerConfig(sys.argv[1])).join()\n"
)
"""A worker process as a tf.data user's script starts one."""


@contextmanager
def workers(num_workers: int, threads: str | None) -> Iterator[str]:
    """An in-process dispatcher and ``num_workers`` worker processes; its target.

    ``threads``: ``"api"`` for ``API_WORKER`` scripts, else ``zmqdata worker``
    daemons (``--threads`` given only if ``threads``).
    """
    dispatcher = service.DispatchServer()
    env = {k: v for k, v in subprocess_env().items() if k not in ENV_VARS}
    if threads == "api":
        command = [sys.executable, "-c", API_WORKER, dispatcher.target]
    else:
        command = [sys.executable, "-m", "zmqdata", "worker"]
        command += ["--dispatcher", dispatcher.target]
        command += ["--threads", threads] if threads else []
    procs = [
        subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        for _ in range(num_workers)
    ]
    with serving(dispatcher, procs) as target:
        yield target


def el_s(bench: Bench, count: int, threads: str | None, elements: int) -> Stat:
    """Elements/s of the map over ``distributed_epoch`` on fresh workers."""
    dataset = zd.Dataset.range(elements).map(matmuls)
    with workers(count, threads) as target:
        remote = distributed(dataset, target, processing_mode="distributed_epoch")
        return bench.measure(per_second(elements, lambda: drain(remote, elements)))


def numpy_workers(bench: Bench) -> dict[str, Any]:
    """1 vs 2 worker processes: CLI (pools limited by default, and not: "none")
    and API-started (defaults)."""
    elements = 60 if bench.quick else 400
    results: dict[str, Any] = {"elements": elements, "matmuls": MATMULS}
    for label, threads in LABELS.items():
        # Unlimited pools on two workers run ~10x slower: fewer elements.
        one = el_s(bench, 1, threads, elements)
        two = el_s(bench, 2, threads, elements // (4 if threads == "none" else 1))
        results[label] = {"1": one, "2": two, "speedup": two / one}
    # Context: a lone worker held to one thread (what each of two gets).
    results["1 thread"] = {"1": el_s(bench, 1, "1", elements)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    bench = Bench(sizes_for(args.quick), args.repeats or (2 if args.quick else 5))
    try:
        results = numpy_workers(bench)
    finally:
        bench.close()
    print("| threads | 1 worker el/s | 2 workers el/s | 2 vs 1 |")
    print("|---|---|---|---|")
    for label in LABELS:
        row = results[label]
        print(f"| {label} | {row['1']:.1f} | {row['2']:.1f} | {row['speedup']:.2f}x |")
    samples = {
        label: {n: list(results[label][n].samples) for n in ("1", "2")}
        for label in LABELS
    }
    one_thread = results["1 thread"]["1"]
    print(f"| 1 (reference) | {one_thread:.1f} | | |")
    samples["1 thread"] = {"1": list(one_thread.samples)}
    print(json.dumps(samples), file=sys.stderr)


if __name__ == "__main__":
    main()
