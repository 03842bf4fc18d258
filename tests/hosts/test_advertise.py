"""What a worker advertises, on this host's loopback (no namespaces needed)."""

from __future__ import annotations

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.service.cluster import free_port, port_of
from zmqdata import errors, service
from zmqdata._runtime import hostaddr


def read_over_tcp(target: str) -> list[int]:
    distribute = service.distribute(
        "distributed_epoch", target, data_transfer_protocol="tcp"
    )
    return ints(zd.Dataset.range(100).apply(distribute))


def listed(c) -> list[tuple[str, str]]:
    return [(w["address"], w["data_address"]) for w in c.status()["workers"]]


@pytest.mark.parametrize("host", ["0.0.0.0", "*"])
def test_a_worker_bound_to_every_interface_advertises_its_route_to_the_dispatcher(
    cluster, host
):
    c = cluster(0)
    worker = c.add_worker(host=host, port=0)  # waits until listed by address
    port = port_of(worker.address)
    assert worker.address == f"tcp://127.0.0.1:{port}"  # dispatcher on 127.0.0.1
    assert listed(c) == [(f"127.0.0.1:{port}", f"tcp://127.0.0.1:{port}")]
    assert sorted(read_over_tcp(c.target)) == list(range(100))


def test_consumers_dial_the_given_worker_address(cluster):
    c = cluster(0)
    port = free_port()  # the advertised address names it before the worker binds
    worker = c.add_worker(port=port, worker_address=f"localhost:{port}")
    assert worker.address == f"tcp://localhost:{port}"
    assert listed(c) == [(f"localhost:{port}", f"tcp://localhost:{port}")]
    assert sorted(read_over_tcp(c.target)) == list(range(100))


def test_a_worker_has_no_address_before_start(cluster):
    worker = service.WorkerServer(service.WorkerConfig(cluster(0).target), start=False)
    try:
        with pytest.raises(errors.FailedPreconditionError, match="until start"):
            _ = worker.address
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("bound", "given", "expected"),
    [
        ("tcp://127.0.0.1:7", None, ("127.0.0.1:7", "tcp://127.0.0.1:7")),
        ("tcp://0.0.0.0:7", None, ("127.0.0.1:7", "tcp://127.0.0.1:7")),
        ("tcp://0.0.0.0:7", "w:9", ("w:9", "tcp://w:9")),
        ("ipc:///tmp/w", "w:9", ("w:9", "ipc:///tmp/w")),
        ("inproc://w", None, ("w", "inproc://w")),
    ],
)
def test_advertise(bound, given, expected):
    assert hostaddr.advertise(bound, "tcp://127.0.0.1:5050", given) == expected
