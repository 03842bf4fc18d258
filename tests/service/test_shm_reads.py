"""Same-host reads through shared memory: exactly once, bit-exact, nothing left behind.

Consumers here read their workers over tcp (in-process workers would be read
over inproc), so the same-host path is taken unless ``ZMQDATA_SHARED_MEMORY=0``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.cli.procs import zmqdata
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata._runtime import shm
from zmqdata._wire.schema import SEGMENT_NAME
from zmqdata._worker import shared

pytestmark = [
    pytest.mark.skipif(not shm.enabled(), reason="no /dev/shm here"),
    pytest.mark.timeout(60),
]

SIZE = 300_000  # float32s: 1.2 MB per element, in a segment of its own


def big(i: Any) -> np.ndarray[Any, Any]:
    out = np.arange(SIZE, dtype=np.float32)
    out[0] = float(i)
    return out


def read(target: str, n: int, **options: Any) -> zd.Dataset:
    return (
        zd.Dataset.range(n)
        .map(big)
        .apply(
            service.distribute(
                "distributed_epoch",
                target,
                data_transfer_protocol="tcp",
                compression=None,
                **options,
            )
        )
    )


def segments_of(owner: str) -> list[str]:
    """``owner``'s segment files (``owner``: a presence name or ``zmqdata-<pid>``)."""
    return [
        name
        for name in os.listdir(shm.DIRECTORY)
        if name.startswith(owner + "-") and SEGMENT_NAME.fullmatch(name)
    ]


def check(elements: list[np.ndarray[Any, Any]], n: int) -> None:
    assert sorted(int(x[0]) for x in elements) == list(range(n))
    expected = np.arange(SIZE, dtype=np.float32)
    for x in elements:
        assert x.dtype == np.float32
        assert np.array_equal(x[1:], expected[1:])


def socket_bytes(c: Cluster) -> int:
    return sum(worker.stats()["bytes"] for worker in c.workers)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(shm.ENV, raising=False)
    return monkeypatch


def test_exactly_once_through_shared_memory_and_freed_on_drop(
    cluster: Callable[..., Cluster], env: pytest.MonkeyPatch
) -> None:
    c = cluster(num_workers=2)
    elements = list(read(c.target, 40))
    check(elements, 40)
    assert socket_bytes(c) < 40 * SIZE * 4 // 20  # the payload did not cross
    assert elements[0].flags.writeable
    del elements
    own = shm.presence()
    poll_for(lambda: not segments_of(own))


def test_dropped_segments_are_given_back_while_reading(
    cluster: Callable[..., Cluster], env: pytest.MonkeyPatch
) -> None:
    env.setattr(shm, "POOL_IDLE_S", 0.2)
    c = cluster(num_workers=1)
    own = shm.presence()
    first = next(shm._PRESENCE._count)  # segments this process made so far
    reader = iter(read(c.target, 300, max_outstanding_requests=4))
    kept, indices = [], []
    try:
        for i in range(250):
            element = next(reader)
            indices.append(int(element[0]))
            if i % 3 == 0:
                kept.append(element)  # never written again while held
    finally:
        reader.close()
    made = next(shm._PRESENCE._count) - first - 1
    # Written again once given back: about the 84 kept, the 53 the worker
    # buffers (64 MiB) and the 4 of credit, not 250.
    assert made < 200
    assert len(set(indices)) == 250
    assert [int(x[0]) for x in kept] == indices[::3]
    expected = np.arange(SIZE, dtype=np.float32)
    assert all(np.array_equal(x[1:], expected[1:]) for x in kept)
    del kept
    poll_for(lambda: not segments_of(own))


def test_variable_zero_reads_over_tcp(
    cluster: Callable[..., Cluster], env: pytest.MonkeyPatch
) -> None:
    env.setenv(shm.ENV, "0")
    c = cluster(num_workers=2)
    check(list(read(c.target, 20)), 20)
    assert socket_bytes(c) >= 20 * SIZE * 4
    assert not segments_of(shm.presence())


def test_mixed_readers_share_a_job_exactly_once(
    cluster: Callable[..., Cluster], env: pytest.MonkeyPatch
) -> None:
    c = cluster(num_workers=1)
    n = 60
    same_host = iter(read(c.target, n, job_name="mixed"))
    env.setenv(shm.ENV, "0")  # read when the iterator starts
    remote = iter(read(c.target, n, job_name="mixed"))
    got: list[np.ndarray[Any, Any]] = []
    for reader in [same_host, remote] * n:
        element = next(reader, None)
        if element is not None:
            got.append(element)
    check(got, n)
    del got
    poll_for(lambda: not segments_of(shm.presence()))


def test_worker_processes_exactly_once(env: pytest.MonkeyPatch) -> None:
    c = Cluster(0, worker_timeout_ms=10_000)  # CLI workers beat every second
    try:
        with (
            zmqdata("worker", "--dispatcher", c.target) as one,
            zmqdata("worker", "--dispatcher", c.target) as two,
        ):
            poll_for(lambda: c.num_registered_workers() == 2, 20)
            check(list(read(c.target, 40)), 40)

            def sent() -> list[int]:  # from the workers' heartbeats
                workers = c.status()["workers"]
                return [w["stats"].get("elements", 0) for w in workers]

            poll_for(lambda: sum(sent()) == 40, 10)
            workers = c.status()["workers"]
            assert (
                sum(w["stats"].get("bytes", 0) for w in workers) < 40 * SIZE * 4 // 20
            )
            owners = [f"zmqdata-{proc.popen.pid}" for proc in (one, two)]
            poll_for(lambda: not any(segments_of(owner) for owner in owners))
    finally:
        c.stop()


def test_a_worker_killed_with_segments_buffered_leaves_none(
    env: pytest.MonkeyPatch,
) -> None:
    c = Cluster(0, worker_timeout_ms=10_000)  # CLI workers beat every second
    try:
        with zmqdata("worker", "--dispatcher", c.target) as worker:
            poll_for(lambda: c.num_registered_workers() == 1, 20)
            owner = f"zmqdata-{worker.popen.pid}"
            reader = iter(read(c.target, 1000))
            next(reader)
            poll_for(lambda: len(segments_of(owner)) >= 5)  # its buffer fills
            worker.popen.send_signal(signal.SIGKILL)
            worker.popen.wait(10)
            assert segments_of(owner)  # nothing ran at its death...
            reader.close()  # ... a reader's close sweeps them
            assert segments_of(owner) == []
    finally:
        c.stop()


_CONSUMER = """
import sys, time
import zmqdata as zd
from zmqdata import service
from tests.service.test_shm_reads import read
reader = iter(read(sys.argv[1], 1000))
next(reader)
print("reading", flush=True)
time.sleep(60)
"""


def test_a_consumer_killed_mid_read_leaves_none(
    cluster: Callable[..., Cluster], env: pytest.MonkeyPatch
) -> None:
    env.setattr(shared, "CLAIM_GRACE_S", 0.5)
    c = cluster(num_workers=1)
    consumer = subprocess.Popen(
        [sys.executable, "-c", _CONSUMER, c.target],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline() == "reading\n"
        own = shm.presence()
        poll_for(lambda: segments_of(own))  # buffered or sent, unclaimed
        consumer.send_signal(signal.SIGKILL)
        consumer.wait(10)
        # Sent ones expire; buffered ones go with the task, deleted once the
        # dispatcher drops the dead consumer's job.
        poll_for(lambda: not segments_of(own), timeout=20)
        shm.sweep()
        assert not [
            f
            for f in os.listdir(shm.DIRECTORY)
            if f.startswith(f"zmqdata-{consumer.pid}-")
        ]
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
        if consumer.stdout is not None:
            consumer.stdout.close()
