"""The service anchor workloads (ANCHORS.md), dispatcher in-process, workers as processes.

Run ``python bench/service.py`` (or ``make bench``). Each figure is the median
of ``--repeats`` runs. Baselines measured in the same run:

* W1: the same pipeline iterated locally, and raw pyzmq PUSH/PULL of 8-byte
  messages (the transport's per-message limit);
* W3: raw pyzmq PUSH/PULL over tcp of the same 4 MiB buffers, zero-copy;
* W5: a DEALER/ROUTER round trip.

tf.data service figures (TF 2.21 on this machine class, from ANCHORS.md) are
printed beside ours for reference; they were not measured by this script.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmqdata as zd
from zmqdata import service

TF_W1_ELEMENTS_S = 3_716
TF_W3_MB_S = 1_571
TF_W5_FIRST_MS, TF_W5_END_MS = 21, 1_012
TF_W6_ELEMENTS_S = 3_642

_WORKER = """
import signal, sys
from zmqdata import service
worker = service.WorkerServer(service.WorkerConfig(sys.argv[1], heartbeat_interval_ms=200))
print("ready", flush=True)
signal.signal(signal.SIGTERM, lambda *_: worker.stop())
worker.join()
"""


@contextmanager
def cluster(num_workers: int) -> Iterator[str]:
    """An in-process dispatcher with ``num_workers`` worker processes."""
    dispatcher = service.DispatchServer()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, dispatcher.target],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(num_workers)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(service.get_status(dispatcher.target)["workers"]) < num_workers:
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register within 60 s")
            time.sleep(0.05)
        yield dispatcher.target
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        dispatcher.stop()


def median(fn: Callable[[], float], repeats: int) -> float:
    fn()  # warm-up
    return statistics.median(fn() for _ in range(repeats))


def drain_rate(dataset: zd.Dataset, count: int) -> Callable[[], float]:
    """A measurement: elements (or ``count`` units) per second of one full pass."""

    def measure() -> float:
        start = time.perf_counter()
        for _ in dataset:
            pass
        return count / (time.perf_counter() - start)

    return measure


# ------------------------------------------------------------------ raw baselines


_SENDER = """
import sys, numpy as np, zmq
size, count, endpoint = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = zmq.Context()
push = ctx.socket(zmq.PUSH)
push.connect(endpoint)
payload = np.random.default_rng(0).integers(0, 256, size, np.uint8)  # like W3's noise
for _ in range(count):
    push.send(payload, copy=size < 65536)
push.close(linger=-1)
ctx.term()
"""


def raw_push_pull(size: int, count: int) -> float:
    """Messages per second of pyzmq PUSH/PULL between two processes over loopback
    tcp, zero-copy sends of ``size``-byte buffers (the transport's limit here)."""
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    sender = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SENDER,
            str(size),
            str(count + 1),
            f"tcp://127.0.0.1:{port}",
        ]
    )
    pull.recv(copy=False)  # the sender is up
    start = time.perf_counter()
    for _ in range(count):
        pull.recv(copy=size < 65536)
    elapsed = time.perf_counter() - start
    sender.wait(60)
    pull.close(linger=0)
    return count / elapsed


def round_trip_ms(count: int = 2_000) -> float:
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")

    def echo() -> None:
        for _ in range(count):
            router.send_multipart(router.recv_multipart())

    thread = threading.Thread(target=echo)
    thread.start()
    start = time.perf_counter()
    for _ in range(count):
        dealer.send(b"x")
        dealer.recv()
    elapsed = time.perf_counter() - start
    thread.join()
    dealer.close(linger=0)
    router.close(linger=0)
    return elapsed / count * 1000


# ------------------------------------------------------------------ workloads


def w1_tiny_scalars(target: str, n: int, repeats: int) -> dict[str, float]:
    ds = zd.Dataset.range(n)
    remote = ds.apply(service.distribute("parallel_epochs", target))
    return {
        "zmqdata": median(drain_rate(remote, n), repeats),
        "local": median(drain_rate(ds, n), repeats),
        "raw": median(lambda: raw_push_pull(8, n), repeats),
    }


def w3_big_tensors(target: str, n: int, repeats: int) -> dict[str, float]:
    array = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    mb = n * array.nbytes / 1e6
    ds = zd.Dataset.from_tensors(array).repeat(n)
    results = {}
    for compression in (None, "AUTO"):
        remote = ds.apply(
            service.distribute("parallel_epochs", target, compression=compression)
        )
        results[f"zmqdata {compression}"] = median(drain_rate(remote, 1), repeats) * mb
    results["raw"] = median(lambda: raw_push_pull(array.nbytes, n), repeats) * mb / n
    return results


def w5_latency(target: str, repeats: int) -> dict[str, float]:
    ds = zd.Dataset.range(10).apply(service.distribute("parallel_epochs", target))
    firsts, ends = [], []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        iterator = iter(ds)
        next(iterator)
        firsts.append((time.perf_counter() - start) * 1000)
        for _ in iterator:
            pass
        ends.append((time.perf_counter() - start) * 1000)
    return {
        "first_ms": statistics.median(firsts[1:]),
        "end_ms": statistics.median(ends[1:]),
        "round_trip_ms": round_trip_ms(),
    }


def w6_coordinated(target: str, rounds: int, repeats: int) -> dict[str, float]:
    """Two consumers in strict rounds (threads of this process), one worker."""
    consumers = 2
    job = itertools.count()

    def run() -> float:
        name = f"w6-{next(job)}"
        datasets = [
            zd.Dataset.range(1 << 62)
            .repeat()
            .apply(
                service.distribute(
                    "parallel_epochs",
                    target,
                    job_name=name,
                    consumer_index=index,
                    num_consumers=consumers,
                )
            )
            for index in range(consumers)
        ]

        def consume(dataset: zd.Dataset) -> None:
            with iter(dataset) as iterator:
                for _ in range(rounds):
                    next(iterator)

        threads = [threading.Thread(target=consume, args=(d,)) for d in datasets]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return rounds * consumers / (time.perf_counter() - start)

    return {"zmqdata": median(run, repeats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scalars", type=int, default=200_000)
    parser.add_argument("--tensors", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()
    print(f"zmqdata {zd.__version__}, {os.cpu_count()} cores, 1 worker process\n")
    with cluster(1) as target:
        w1 = w1_tiny_scalars(target, args.scalars, args.repeats)
        w3 = w3_big_tensors(target, args.tensors, args.repeats)
        w5 = w5_latency(target, args.repeats * 4)
        w6 = w6_coordinated(target, args.rounds, args.repeats)
    rows = [
        (
            "W1 int64 scalars",
            f"{w1['zmqdata']:,.0f} el/s",
            (
                f"local {w1['local']:,.0f} el/s ({w1['zmqdata'] / w1['local']:.2f}x); "
                f"raw 8 B msgs {w1['raw']:,.0f}/s"
            ),
            f"{TF_W1_ELEMENTS_S:,} el/s ({w1['zmqdata'] / TF_W1_ELEMENTS_S:.1f}x)",
        ),
        (
            "W3 4 MiB, no compression",
            f"{w3['zmqdata None']:,.0f} MB/s",
            f"raw zero-copy {w3['raw']:,.0f} MB/s ({w3['zmqdata None'] / w3['raw']:.0%})",
            f"{TF_W3_MB_S:,} MB/s ({w3['zmqdata None'] / TF_W3_MB_S:.1f}x)",
        ),
        (
            "W3 4 MiB, AUTO (noise)",
            f"{w3['zmqdata AUTO']:,.0f} MB/s",
            f"raw zero-copy {w3['raw']:,.0f} MB/s ({w3['zmqdata AUTO'] / w3['raw']:.0%})",
            f"1,089 MB/s ({w3['zmqdata AUTO'] / 1089:.1f}x)",
        ),
        (
            "W5 range(10) first element",
            f"{w5['first_ms']:.1f} ms",
            f"round trip {w5['round_trip_ms'] * 1000:.0f} us",
            f"{TF_W5_FIRST_MS} ms",
        ),
        (
            "W5 range(10) end of input",
            f"{w5['end_ms']:.1f} ms",
            "",
            f"{TF_W5_END_MS:,} ms ({TF_W5_END_MS / w5['end_ms']:.0f}x faster)",
        ),
        (
            "W6 coordinated reads, 2 consumers",
            f"{w6['zmqdata']:,.0f} el/s",
            f"W1 same run {w1['zmqdata']:,.0f} el/s",
            f"{TF_W6_ELEMENTS_S:,} el/s ({w6['zmqdata'] / TF_W6_ELEMENTS_S:.1f}x)",
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("workload", "zmqdata", "baseline, same run", "tf.data service (ANCHORS)")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
