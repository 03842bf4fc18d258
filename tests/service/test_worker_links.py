"""A reader and its workers' connections: unreachable workers, removed workers, fair credit."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster, free_port
from zmqdata import service
from zmqdata._wire import messages as m
from zmqdata.errors import UnavailableError

FAST_S = 3.0


@pytest.fixture
def short_worker_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMQDATA_WORKER_TIMEOUT_S", "0.5")


def _read(target: str, **options: object) -> zd.Dataset:
    return zd.Dataset.range(10**9).apply(
        service.distribute(
            "parallel_epochs", target, data_transfer_protocol="tcp", **options
        )
    )


def test_a_worker_advertising_an_unreachable_address_fails_the_read(
    cluster: Callable[..., Cluster], sockets: Any, short_worker_timeout: None
) -> None:
    unreachable = f"127.0.0.1:{free_port()}"  # nothing listens there
    c = cluster(num_workers=0, worker_timeout_ms=30_000)
    register = m.RegisterWorker(
        worker_address=unreachable, data_address=f"tcp://{unreachable}"
    )
    sockets(c.target).send(m.encode(register))
    poll_for(lambda: c.num_registered_workers() == 1)
    start = time.monotonic()
    with pytest.raises(
        UnavailableError, match=f"worker tcp://{unreachable} .*unreachable"
    ):
        next(iter(_read(c.target)))
    assert time.monotonic() - start < FAST_S


def test_a_connected_worker_with_a_slow_pipeline_is_not_unreachable(
    cluster: Callable[..., Cluster], short_worker_timeout: None
) -> None:
    target = cluster(num_workers=1).target

    def slow(x: object) -> object:
        threading.Event().wait(1.5)
        return x

    slow_ds = zd.Dataset.range(2).map(slow)
    ds = slow_ds.apply(
        service.distribute("parallel_epochs", target, data_transfer_protocol="tcp")
    )
    assert [int(x) for x in ds] == [0, 1]  # 1.5 s per element, timeout 0.5 s


def test_scarce_credit_rotates_over_every_worker(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(num_workers=5, worker_timeout_ms=30_000)
    with iter(_read(c.target, max_outstanding_requests=1)) as it:
        first = Counter(int(next(it)) for _ in range(100))
        assert first[0] == 5  # every worker's stream has started
        # Removing workers frees the credit held by their requests at once,
        # not when the dispatcher times them out.
        for index in range(4):
            c.stop_worker(index)
        start = time.monotonic()
        for _ in range(200):
            next(it)
        assert time.monotonic() - start < FAST_S


def test_a_long_read_keeps_no_socket_for_workers_that_left(cluster):
    """Workers come and go; the reader closes the sockets of the ones gone."""
    c = cluster(num_workers=1, worker_timeout_ms=300)
    ds = zd.Dataset.range(10**9).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=4)
    )
    with iter(ds) as it:
        next(it)
        fetcher = it._fetcher
        for _ in range(3):  # a worker joins, the older one leaves
            c.add_worker()
            c.workers[-2].stop()
            poll_for(lambda: len(fetcher._core.tasks) == 1, timeout=10)
            next(it)
        poll_for(lambda: len(fetcher._sockets_by_endpoint) == 1, timeout=10)
        watched = set(fetcher._links._by_endpoint)
        assert watched == {c.target, *fetcher._sockets_by_endpoint}
