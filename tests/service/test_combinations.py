"""Every combination of the reading options either reads or fails within seconds.

Mode (OFF, DYNAMIC, static DATA) x sharing (a cross-trainer cache or not) x
coordinated reads (2 consumers or not) x ``target_workers`` x ``exactly_once``:
72 reads, none of which may wait silently. A combination that has no meaning
must be refused at once, with an error that names what is wrong.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import zmqdata as zd
from tests.service.cluster import Cluster, held_ports
from zmqdata import errors, service

P = service.ShardingPolicy
WANTED = 20
"""Elements each consumer reads."""
DEADLINE_S = 10.0

COMBINATIONS = list(
    itertools.product(
        (P.OFF, P.DYNAMIC, P.DATA),
        (False, True),  # a cross-trainer cache
        (False, True),  # coordinated reads by 2 consumers
        ("AUTO", "ANY", "LOCAL"),
        (True, False),  # exactly_once
    )
)


@pytest.fixture
def static_listed() -> Iterator[Cluster]:
    """Two workers, listed in ``worker_addresses`` (static sharding works too)."""
    with held_ports(2) as ports:
        addresses = [f"127.0.0.1:{port}" for port in ports]
        c = Cluster(0, dispatcher_options={"worker_addresses": addresses})
    try:
        for port, address in zip(ports, addresses, strict=True):
            c.add_worker(port=port, worker_address=address)
        yield c
    finally:
        c.stop()


def read(c: Cluster, number: int, combination: tuple[Any, ...]) -> list[Any]:
    """What each consumer read, or the error one of them raised."""
    mode, cached, coordinated, target_workers, exactly_once = combination
    infinite = cached or coordinated  # both need an endless dataset
    ds = zd.Dataset.range(10_000)
    ds = ds.repeat() if infinite else ds
    consumers = 2 if coordinated else 1
    results: list[Any] = [None] * consumers

    def consume(index: int) -> None:
        options: dict[str, Any] = {
            "job_name": f"combination-{number}",
            "target_workers": target_workers,
            "exactly_once": exactly_once,
        }
        if cached:
            options["cross_trainer_cache"] = service.CrossTrainerCache(f"t{index}")
        if coordinated:
            options.update(num_consumers=2, consumer_index=index)
        try:
            read = ds.apply(service.distribute(mode, c.target, **options))
            results[index] = [int(x) for x in read.take(WANTED)]
        except (errors.ZmqDataError, ValueError, TypeError) as error:
            results[index] = error

    threads = [
        threading.Thread(target=consume, args=(i,), daemon=True)
        for i in range(consumers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert not any(t.is_alive() for t in threads), (
        f"{combination}: still waiting after {DEADLINE_S} s"
    )
    return results


def name(number: int) -> str:
    mode, cached, coordinated, target_workers, exactly_once = COMBINATIONS[number]
    return "-".join(
        (
            mode.name,
            "cache" if cached else "no_cache",
            "coordinated" if coordinated else "independent",
            target_workers,
            "exactly_once" if exactly_once else "at_most_once",
        )
    )


@pytest.mark.parametrize("number", range(len(COMBINATIONS)), ids=name)
def test_each_combination_reads_or_fails_at_once(static_listed: Cluster, number: int):
    combination = COMBINATIONS[number]
    results = read(static_listed, number, combination)
    for result in results:
        if isinstance(result, Exception):
            assert str(result), f"{name(number)}: an error with no message"
        else:
            assert len(result) == WANTED, f"{name(number)}: read {len(result)}"
