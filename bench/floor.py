"""What ZeroMQ and pyzmq alone cost a dispatcher: a no-op server's CPU.

``floor(rate, connections)`` runs a ROUTER that answers every request with
its own bytes, in its own process on the dispatcher's CPU, with the
dispatcher's loop (poll, drain, reply, let the next requests gather for
``COALESCE_S``) and process tuning (``tuning.serve_a_fleet``) but no decoding,
no state and no encoding; a driver on the other CPU sends ``rate`` requests a
second spread over ``connections`` connections. Its CPU seconds per second is
the part of the dispatcher's that no change to zmqdata's Python can remove:
the baseline ``bench/control.py`` shows next to the dispatcher's.

    python -c "from bench.floor import floor; print(floor(19_000, 10_000))"
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from typing import Any

import zmq

from bench.common import subprocess_env
from bench.daemon import cpu_seconds, free_port, pin, pinned
from bench.fleet import Schedule, alias

ECHO = """
import sys
import zmq
from zmqdata._dispatcher.server import COALESCE_S
from zmqdata._runtime import clock, tuning
tuning.serve_a_fleet()
sock = zmq.Context.instance().socket(zmq.ROUTER)
sock.bind(sys.argv[1])
poller = zmq.Poller()
poller.register(sock, zmq.POLLIN)
SNDMORE, NOBLOCK = int(zmq.SNDMORE), int(zmq.NOBLOCK)
print("ready", flush=True)
while True:
    poller.poll()
    handled = 0
    while True:
        try:
            peer, payload = sock.recv_multipart(NOBLOCK)
        except zmq.Again:
            break
        sock.send(peer, SNDMORE)
        sock.send(payload)
        handled += 1
    if handled > 1:
        clock.sleep(COALESCE_S)
"""
PAYLOAD = b"x" * 64
"""About a quiet heartbeat's size."""


def _drive(
    target: str, rate: float, connections: int, seconds: float, cpu: int, conn: Any
) -> None:
    """Sends ``rate`` requests/s round-robin over ``connections``; reports replies."""
    pin(cpu)
    context = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    for i in range(connections):
        sock.setsockopt(zmq.ROUTING_ID, b"floor-%d" % i)
        sock.setsockopt(zmq.CONNECT_ROUTING_ID, alias(i))
        sock.connect(target)
    for i in range(connections):  # every connection up before the clock runs
        sock.send(alias(i), zmq.SNDMORE)
        sock.send(PAYLOAD)
    for _ in range(connections):
        sock.recv_multipart()
    conn.send("ready")
    conn.recv()
    schedule, sent, got = Schedule(), 0, 0
    start = time.perf_counter()
    for n in range(int(rate * seconds)):
        schedule.add(start + n / rate, n % connections, "floor")
    end = start + seconds
    while (now := time.perf_counter()) < end:
        for _, index, _ in schedule.take(now):
            sock.send(alias(index), zmq.SNDMORE)
            sock.send(PAYLOAD)
            sent += 1
        while sock.poll(0):
            sock.recv_multipart()
            got += 1
        wait_ms = max(0.0, (min(schedule.next_at(), end) - time.perf_counter()) * 1000)
        if sock.poll(wait_ms):
            sock.recv_multipart()
            got += 1
    sock.close(linger=0)
    context.term()
    conn.send((sent, got))


def floor(
    rate: float, connections: int, seconds: float = 5.0, server_cpu: int = 0
) -> dict[str, float]:
    """The no-op server's CPU s/s at ``rate`` requests/s over ``connections``."""
    port = free_port()
    target = f"tcp://127.0.0.1:{port}"
    server = subprocess.Popen(
        pinned([sys.executable, "-c", ECHO, target], server_cpu),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    driver = spawn.Process(
        target=_drive, args=(target, rate, connections, seconds, 1 - server_cpu, child)
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the no-op server did not start")
        driver.start()
        if parent.recv() != "ready":
            raise RuntimeError("the floor's driver did not start")
        cpu, start = cpu_seconds(server.pid), time.perf_counter()
        parent.send("go")
        sent, got = parent.recv()
        if sent < 0.99 * rate * seconds:
            raise RuntimeError(
                f"the floor's driver sent {sent} of {rate * seconds:.0f}"
            )
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(server.pid) - cpu
    finally:
        server.kill()
        server.wait(30)
        driver.join(30)
        if driver.is_alive():
            driver.kill()
    return {
        "rate": rate,
        "served_per_s": got / elapsed,
        "cpu": cpu / elapsed,
        "us_per_request": cpu / max(got, 1) * 1e6,
    }
