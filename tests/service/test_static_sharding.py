"""Static sharding (FILE, DATA, FILE_OR_DATA, HINT) over a fixed worker list."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import Cluster, held_ports
from zmqdata import errors, service

P = service.ShardingPolicy
WORKERS = 3


def static_cluster(
    cluster: Callable[..., Cluster], addresses: list[str] | None = None
) -> Cluster:
    """Three workers on fixed ports, listed (in that order) in worker_addresses."""
    with held_ports(WORKERS) as ports:
        own = [f"127.0.0.1:{port}" for port in ports]
        c = cluster(0, dispatcher_options={"worker_addresses": addresses or own})
    for port, address in zip(ports, own, strict=True):
        c.add_worker(port=port, worker_address=address)
    return c


def read(ds: zd.Dataset, c: Cluster, mode: P, **options: Any) -> list[Any]:
    options.setdefault("target_workers", "LOCAL")
    return ints(ds.apply(service.distribute(mode, c.target, **options)))


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    paths = []
    for k in range(8):
        path = tmp_path / f"shard-{k}.txt"
        path.write_text(str(k * 100))
        paths.append(str(path))
    return paths


def read_file(path: Any) -> Any:
    return np.int64(Path(str(path)).read_text())


def test_data_covers_every_element_exactly_once(cluster):
    c = static_cluster(cluster)
    c.add_worker()  # in the process but not in worker_addresses: no task
    got = read(zd.Dataset.range(100).map(lambda x: x * 3), c, P.DATA, job_name="d")
    assert Counter(got) == Counter(range(0, 300, 3))
    # Named: listed after it is over; finished once the dispatcher has heard
    # the end from every task (a heartbeat later on a loaded machine).
    [job] = poll_for(lambda: [j for j in c.status()["jobs"] if j["finished"]])
    assert job["processing_mode"] == "DATA"


def test_hint_fills_in_the_worker_count_and_index(cluster):
    c = static_cluster(cluster)
    ds = zd.Dataset.range(60).shard(service.SHARD_HINT, service.SHARD_HINT)
    assert Counter(read(ds.map(lambda x: x + 1), c, P.HINT)) == Counter(range(1, 61))


def test_file_reads_every_file_exactly_once(cluster, files):
    c = static_cluster(cluster)
    ds = zd.Dataset.list_files(files, shuffle=False).map(read_file)
    assert Counter(read(ds, c, P.FILE)) == Counter(range(0, 800, 100))


def test_file_with_fewer_files_than_workers_fails_the_consumer(cluster, files):
    c = static_cluster(cluster)
    ds = zd.Dataset.list_files(files[:2], shuffle=False).map(read_file)
    with pytest.raises(errors.InvalidArgumentError) as info:
        read(ds, c, P.FILE)
    assert "not enough for the required 3 shards/workers" in str(info.value)


def test_file_or_data_shards_files_or_elements(cluster, files):
    c = static_cluster(cluster)
    by_file = zd.Dataset.list_files(files, shuffle=False).map(read_file)
    assert Counter(read(by_file, c, P.FILE_OR_DATA)) == Counter(range(0, 800, 100))
    few = zd.Dataset.list_files(files[:2], shuffle=False).map(read_file)
    assert Counter(read(few, c, P.FILE_OR_DATA)) == Counter([0, 100])
    numbers = zd.Dataset.range(40)
    assert Counter(read(numbers, c, P.FILE_OR_DATA)) == Counter(range(40))


def test_port_placeholders_and_auto_target_workers(cluster):
    c = static_cluster(cluster, addresses=["127.0.0.1:%port%"] * WORKERS)
    indices = sorted(w["index"] for w in c.status()["workers"])
    assert indices == [0, 1, 2]
    # target_workers="AUTO" means LOCAL under static sharding, as in tf.data.
    got = read(zd.Dataset.range(30), c, P.DATA, target_workers="AUTO")
    assert Counter(got) == Counter(range(30))


def test_static_sharding_reads_local_workers_only(cluster):
    c = static_cluster(cluster)
    with pytest.raises(
        errors.InvalidArgumentError, match="requires reading from local"
    ):
        read(zd.Dataset.range(3), c, P.DATA, target_workers="ANY")


def test_static_sharding_needs_worker_addresses(cluster):
    c = cluster(1)
    with pytest.raises(errors.InvalidArgumentError, match="worker_addresses"):
        read(zd.Dataset.range(3), c, P.HINT)
