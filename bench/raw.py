"""Raw baselines measured in the same run: pyzmq PUSH/PULL, a DEALER/ROUTER
round trip, memcpy.

Not a script; ``python bench/run.py`` uses it. Every function memoises its
figure in the run's ``Bench``, so workloads that share a baseline share one
measurement.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import zmq

from bench.codec import memcpy_seconds
from bench.common import Bench, Stat

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


def _push_pull_once(size: int, count: int) -> float:
    """Messages per second of PUSH (another process) -> PULL (this one) over
    loopback tcp, zero-copy for ``size`` >= 64 KiB as pyzmq does."""
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{port}"
    sender = subprocess.Popen(
        [sys.executable, "-c", _SENDER, str(size), str(count + 1), endpoint]
    )
    try:
        pull.recv(copy=False)  # the sender is up
        start = time.perf_counter()
        for _ in range(count):
            pull.recv(copy=size < 65536)
        elapsed = time.perf_counter() - start
        sender.wait(60)
    finally:
        if sender.poll() is None:
            sender.kill()
        pull.close(linger=0)
    return count / elapsed


def push_pull_msgs_s(bench: Bench, size: int) -> Stat:
    """Raw pyzmq PUSH/PULL of ``size``-byte messages between two processes."""
    count = bench.sizes.count_for(size)
    return bench.memo(
        ("raw", size), lambda: bench.measure(lambda: _push_pull_once(size, count))
    )


def push_pull_mb_s(bench: Bench, size: int) -> Stat:
    return push_pull_msgs_s(bench, size).scaled(size / 1e6)


def _round_trip_us(count: int = 2_000) -> float:
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")

    def echo() -> None:
        for _ in range(count + 1):
            router.send_multipart(router.recv_multipart())

    thread = threading.Thread(target=echo)
    thread.start()
    dealer.send(b"x")  # connected
    dealer.recv()
    start = time.perf_counter()
    for _ in range(count):
        dealer.send(b"x")
        dealer.recv()
    elapsed = time.perf_counter() - start
    thread.join()
    dealer.close(linger=0)
    router.close(linger=0)
    return elapsed / count * 1e6


def round_trip_us(bench: Bench) -> Stat:
    """A DEALER/ROUTER round trip over loopback tcp (echo thread), in us."""
    return bench.memo("round trip", lambda: bench.measure(_round_trip_us))


def memcpy_mb_s(bench: Bench, size: int) -> Stat:
    """``np.copyto`` of ``size`` bytes, in MB/s (bench/codec.py's measurement)."""
    return bench.memo(
        ("memcpy", size),
        lambda: Stat([size / memcpy_seconds(size, bench.repeats) / 1e6]),
    )
