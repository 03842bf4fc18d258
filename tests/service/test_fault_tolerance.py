"""A fault-tolerant dispatcher restarts from its journal; readers carry on."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import zmqdata as zd
from tests.service.cluster import port_of
from zmqdata import errors, service
from zmqdata._dispatcher import journal


def restart_dispatcher(c) -> None:
    """Stops the cluster's dispatcher; starts a new one on its port, same config."""
    config = dataclasses.replace(c.dispatcher.config, port=port_of(c.target))
    c.dispatcher.stop()
    c.dispatcher = service.DispatchServer(config)


def ft_cluster(cluster, tmp_path, num_workers: int = 1):
    return cluster(
        num_workers=num_workers,
        dispatcher_options={"work_dir": str(tmp_path), "fault_tolerant_mode": True},
    )


def test_parallel_epochs_continues_in_order_across_a_restart(cluster, tmp_path):
    c = ft_cluster(cluster, tmp_path)
    ds = zd.Dataset.range(100).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=1)
    )
    with iter(ds) as iterator:
        got = [int(next(iterator)) for _ in range(50)]
        restart_dispatcher(c)
        got += [int(x) for x in iterator]
    assert got == list(range(100))


@pytest.mark.parametrize("compact_every", [None, 5], ids=["journal", "compacting"])
def test_dynamic_with_repeat_hands_no_split_out_twice_across_a_restart(
    cluster, tmp_path, monkeypatch, compact_every
):
    if compact_every is not None:  # snapshots (of ~1 kB) every few splits
        monkeypatch.setattr(journal, "COMPACT_MIN_EVENTS", compact_every)
    c = ft_cluster(cluster, tmp_path, num_workers=2)
    ds = (
        zd.Dataset.range(300)
        .repeat(3)
        .apply(
            service.distribute(
                "distributed_epoch", c.target, max_outstanding_requests=4
            )
        )
    )
    with iter(ds) as iterator:
        got = [int(next(iterator)) for _ in range(200)]
        restart_dispatcher(c)
        got += [int(x) for x in iterator]
    assert Counter(got) == {i: 3 for i in range(300)}
    if compact_every is not None:
        assert list(tmp_path.glob("snapshot-*.msgpack"))


def test_named_jobs_and_dataset_ids_survive_a_restart(cluster, tmp_path):
    c = ft_cluster(cluster, tmp_path)
    dataset_id = service.register_dataset(c.target, zd.Dataset.range(5))
    restart_dispatcher(c)
    assert service.register_dataset(c.target, zd.Dataset.range(5)) == dataset_id
    ds = service.from_dataset_id("parallel_epochs", c.target, dataset_id, job_name="j")
    assert sorted(int(x) for x in ds) == list(range(5))


def test_the_rest_arrives_from_the_worker_when_the_dispatcher_is_gone(
    cluster, monkeypatch
):
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "1")
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(100).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=1)
    )
    got: list[int] = []
    with iter(ds) as iterator:
        got += [int(next(iterator)) for _ in range(10)]
        c.dispatcher.stop()
        with pytest.raises(errors.UnavailableError):  # only end of input needs it
            drain_into(got, iterator)
    assert got == list(range(100))


def drain_into(got: list[int], iterator) -> None:
    for element in iterator:
        got.append(int(element))


def test_a_restart_without_fault_tolerance_is_a_clear_error(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(1_000).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=1)
    )
    with iter(ds) as iterator:
        next(iterator)
        restart_dispatcher(c)
        with pytest.raises((errors.FailedPreconditionError, errors.NotFoundError)):
            drain_into([], iterator)
