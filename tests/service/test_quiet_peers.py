"""Quiet peers on a real cluster: workers and readers heartbeat rarely while
nothing changes, and no guarantee moves (liveness, exactly once, stats)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata._worker.control_core import STRETCH

WORKER_TIMEOUT_MS = 2_000
"""A quiet worker's ceiling: a quarter of it, 500 ms (its base: 100 ms)."""


def test_an_idle_worker_heartbeats_at_its_ceiling_and_stays(
    cluster: Callable[..., Cluster],
) -> None:
    one = cluster(1, worker_timeout_ms=WORKER_TIMEOUT_MS, heartbeat_interval_ms=100)

    def interval() -> float:
        [worker] = one.status()["workers"]
        return worker["heartbeat_interval_s"] or 0.0

    poll_for(lambda: interval() >= 0.4, timeout=5.0)
    assert interval() <= WORKER_TIMEOUT_MS / 4000 + 0.15
    poll_for(lambda: one.status()["uptime_s"] > 2 * WORKER_TIMEOUT_MS / 1000, 10.0)
    assert one.num_registered_workers() == 1  # quiet, not lost


def test_stats_sent_as_deltas_match_the_workers_own(
    cluster: Callable[..., Cluster],
) -> None:
    one = cluster(1, worker_timeout_ms=WORKER_TIMEOUT_MS, heartbeat_interval_ms=100)
    ds = zd.Dataset.range(300).apply(
        service.distribute("distributed_epoch", one.target)
    )
    assert sorted(ds) == list(range(300))

    def reported() -> bool:
        [worker] = one.status()["workers"]
        own = one.workers[0].stats()
        return worker["stats"].get("elements") == own["elements"] == 300

    poll_for(reported, timeout=5.0)  # the idle worker's deltas: nothing, merged


def test_a_reader_quiet_past_its_fence_timeout_reads_on_exactly_once(
    cluster: Callable[..., Cluster],
) -> None:
    one = cluster(
        2,
        worker_timeout_ms=WORKER_TIMEOUT_MS,
        dispatcher_options={"fence_timeout_ms": 2_000},
    )
    ds = zd.Dataset.range(2_000).apply(
        service.distribute("distributed_epoch", one.target, max_outstanding_requests=1)
    )
    seen = []
    iterator = iter(ds)
    seen += [next(iterator) for _ in range(10)]

    def quiet_for_a_while() -> bool:  # the trainer waits; its reader goes quiet
        return one.status()["uptime_s"] > 3.0

    poll_for(quiet_for_a_while, timeout=10.0)
    one.stop_worker(0)  # a loss while the reader is quiet: it must fence in time
    seen += list(iterator)
    assert sorted(seen) == list(range(2_000))


def slowly(x: Any) -> Any:
    """5 ms an element: splits of 10 take 50 ms."""
    threading.Event().wait(0.005)
    return x


def test_a_worker_asking_for_splits_heartbeats_less_and_stays(
    cluster: Callable[..., Cluster],
) -> None:
    """Its split requests show it alive: quiet heartbeats wait, up to STRETCH."""
    one = cluster(1, worker_timeout_ms=1_000, heartbeat_interval_ms=50)
    ceiling_s = 0.25  # a quarter of the timeout
    slow = zd.Dataset.range(640).map(slowly)
    ds = slow.apply(service.distribute("distributed_epoch", one.target))
    intervals: list[float] = []

    def stretched() -> bool:
        [worker] = one.status()["workers"]
        intervals.append(worker["heartbeat_interval_s"] or 0.0)
        return intervals[-1] > 1.5 * ceiling_s

    iterator = iter(ds)
    seen = [next(iterator)]
    poll_for(stretched, timeout=10.0)  # splits every ~50 ms, heartbeats rarer
    seen += list(iterator)
    assert sorted(seen) == list(range(640))
    assert max(intervals) <= STRETCH * ceiling_s + 0.15
    assert one.num_registered_workers() == 1  # its timeout passed: never lost
