"""Servers survive hostile input and leave nothing behind when stopped."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from typing import Any

import msgpack
import pytest
import zmq

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import port_of
from zmqdata import errors, service
from zmqdata._version import PROTOCOL_VERSION
from zmqdata._wire import messages as m

REPLY_TIMEOUT_MS = 5_000


@pytest.fixture
def raw_dealer(sockets: Any) -> Any:
    """``raw_dealer(endpoint)`` -> a plain zmq DEALER, closed at teardown."""
    return sockets


def answer(sock: zmq.Socket[Any]) -> m.Message:
    assert sock.poll(REPLY_TIMEOUT_MS), "no answer"
    frames = sock.recv_multipart()
    return m.decode(frames[0])


def error_answer(sock: zmq.Socket[Any], code: str) -> m.Error:
    reply = answer(sock)
    assert isinstance(reply, m.Error), reply
    assert reply.code == code, reply
    return reply


def versioned(body: dict[str, Any]) -> bytes:
    return msgpack.packb(body)  # type: ignore[no-any-return]


def still_serves(target: str, n: int = 30) -> None:
    for mode in ("parallel_epochs", "distributed_epoch"):
        ds = zd.Dataset.range(n).apply(service.distribute(mode, target))
        assert sorted(ints(ds)) == list(range(n))


def test_dispatcher_answers_garbage_with_errors_and_keeps_serving(cluster, raw_dealer):
    c = cluster(num_workers=1)
    sock = raw_dealer(c.target)
    sock.send(b"\xc1 not msgpack")
    error_answer(sock, "INVALID_ARGUMENT")
    sock.send(b"")
    error_answer(sock, "INVALID_ARGUMENT")
    sock.send(versioned({"v": PROTOCOL_VERSION + 1, "t": "get_status"}))
    error_answer(sock, "FAILED_PRECONDITION")
    sock.send(versioned({"v": PROTOCOL_VERSION, "t": ["unhashable"]}))
    error_answer(sock, "INVALID_ARGUMENT")
    sock.send(versioned({"v": PROTOCOL_VERSION, "t": "get_split", "iteration_id": "x"}))
    error_answer(sock, "INVALID_ARGUMENT")
    # Well-formed messages that are not dispatcher requests.
    for wrong in (
        m.GetElements(request_id=41, task_id=1, client_id=1, max_elements=5),
        m.Elements(request_id=42, task_id=1, count=0),
        m.Ok(request_id=43),
    ):
        sock.send(m.encode(wrong))
        assert error_answer(sock, "INVALID_ARGUMENT").request_id == wrong.request_id
    # Requests about things that do not exist.
    sock.send(m.encode(m.GetSplit(request_id=44, iteration_id=10**9, repetition=0)))
    error_answer(sock, "NOT_FOUND")
    sock.send(m.encode(m.WorkerHeartbeat(request_id=45, worker_id=1, tasks=[[1]])))
    error_answer(sock, "INVALID_ARGUMENT")
    sock.send(m.encode(m.GetOrRegisterDataset(request_id=46, pipeline=b"junk")))
    error_answer(sock, "INVALID_ARGUMENT")
    # A "worker" whose endpoint consumers could not even connect to.
    bogus = m.RegisterWorker(request_id=48, worker_address="x:1", data_address="junk")
    sock.send(m.encode(bogus))
    error_answer(sock, "INVALID_ARGUMENT")
    # A multi-frame message is dropped: the next answer is to the next request.
    sock.send_multipart([b"one", b"two", b"three"])
    sock.send(m.encode(m.GetStatus(request_id=47)))
    reply = answer(sock)
    assert isinstance(reply, m.GetStatusReply)
    assert reply.request_id == 47
    still_serves(c.target)


def test_worker_data_socket_answers_garbage_with_errors_and_keeps_serving(
    cluster, raw_dealer
):
    c = cluster(num_workers=1)
    sock = raw_dealer(c.workers[0].address)
    sock.send(b"garbage")
    error_answer(sock, "INVALID_ARGUMENT")
    sock.send(versioned({"v": 0, "t": "get_elements"}))
    error_answer(sock, "FAILED_PRECONDITION")
    sock.send(m.encode(m.GetStatus(request_id=51)))
    assert error_answer(sock, "INVALID_ARGUMENT").request_id == 51
    sock.send(
        m.encode(m.RegisterWorker(request_id=52, worker_address="x", data_address="y"))
    )
    error_answer(sock, "INVALID_ARGUMENT")
    for bad in (0, -1):
        sock.send(
            m.encode(
                m.GetElements(request_id=53, task_id=1, client_id=1, max_elements=bad)
            )
        )
        error_answer(sock, "INVALID_ARGUMENT")
    sock.send(
        m.encode(
            m.GetElements(request_id=54, task_id=999_999, client_id=1, max_elements=1)
        )
    )
    error_answer(sock, m.ABSENT)
    sock.send_multipart([b"one", b"two"])
    sock.send(m.encode(m.Ok(request_id=55)))
    assert error_answer(sock, "INVALID_ARGUMENT").request_id == 55
    still_serves(c.target)
    # ... over its tcp endpoint as well as in-process.
    ds = zd.Dataset.range(20).apply(
        service.distribute("parallel_epochs", c.target, data_transfer_protocol="tcp")
    )
    assert ints(ds) == list(range(20))


def zmqdata_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("zmqdata-")}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_stop_releases_ports_and_threads_at_once():
    before = zmqdata_threads()
    # The shared context starts its I/O threads (and their descriptors) with its
    # first socket, once per process: make sure that happened before counting.
    zmq.Context.instance().socket(zmq.PAIR).close(linger=0)
    fds = open_fds() if os.path.isdir("/proc/self/fd") else None
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    worker = service.WorkerServer(
        service.WorkerConfig(dispatcher.target, port=0, heartbeat_interval_ms=50)
    )
    dispatcher_port, worker_port = port_of(dispatcher.target), port_of(worker.address)
    assert dispatcher.target == f"tcp://127.0.0.1:{dispatcher_port}"
    assert worker.address == f"tcp://127.0.0.1:{worker_port}"
    for protocol in (None, "tcp"):
        ds = zd.Dataset.range(50).apply(
            service.distribute(
                "distributed_epoch", dispatcher.target, data_transfer_protocol=protocol
            )
        )
        assert sorted(ints(ds)) == list(range(50))
    worker.stop()
    dispatcher.stop()
    # Nothing lingers: no thread, and both ports can be bound again right away.
    assert zmqdata_threads() <= before
    context = zmq.Context.instance()
    for port in (dispatcher_port, worker_port):
        sock = context.socket(zmq.ROUTER)
        try:
            sock.bind(f"tcp://127.0.0.1:{port}")
        finally:
            sock.close(linger=0)
    # Sockets (and the pipes that wake the loops) are closed too; ZeroMQ
    # releases a closed socket's descriptor on its own thread, so wait for it.
    if fds is not None:
        poll_for(lambda: open_fds() <= fds)
    worker.stop()  # idempotent
    dispatcher.stop()


def test_servers_restart_on_the_same_ports():
    dispatcher_port, worker_port = 0, 0  # the first round binds any free ports
    for _ in range(2):
        with (
            service.DispatchServer(
                service.DispatcherConfig(port=dispatcher_port)
            ) as dispatcher,
            service.WorkerServer(
                service.WorkerConfig(dispatcher.target, port=worker_port)
            ) as worker,
        ):
            ds = zd.Dataset.range(10).apply(
                service.distribute("parallel_epochs", dispatcher.target)
            )
            assert ints(ds) == list(range(10))
            if dispatcher_port:  # the second round: the first round's ports
                assert port_of(dispatcher.target) == dispatcher_port
                assert port_of(worker.address) == worker_port
            dispatcher_port = port_of(dispatcher.target)
            worker_port = port_of(worker.address)


def test_stop_during_a_read_ends_every_thread(cluster):
    before = zmqdata_threads()
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(100_000).apply(
        service.distribute("distributed_epoch", c.target, max_outstanding_requests=2)
    )
    with iter(ds) as it:
        next(it)
        c.stop()
    poll_for(lambda: zmqdata_threads() <= before)  # the autouse check, too


def test_stop_before_start_and_start_after_stop():
    dispatcher = service.DispatchServer(start=False)
    dispatcher.stop()
    fresh = service.DispatchServer(start=False)
    fresh.start()
    fresh.start()  # no-op
    assert service.get_status(fresh.target)["workers"] == []
    worker = service.WorkerServer(service.WorkerConfig(fresh.target), start=False)
    worker.stop()
    assert service.get_status(fresh.target)["workers"] == []  # never registered
    fresh.stop()


def test_ipc_servers_serve_and_restart_on_the_same_paths(tmp_path):
    dispatcher_path = tmp_path / "dispatcher.sock"
    worker_path = tmp_path / "worker.sock"
    for _ in range(2):  # the second round binds the paths the first one used
        with (
            service.DispatchServer(
                service.DispatcherConfig(protocol="ipc", host=str(dispatcher_path))
            ) as dispatcher,
            service.WorkerServer(
                service.WorkerConfig(
                    dispatcher.target,
                    protocol="ipc",
                    host=str(worker_path),
                    heartbeat_interval_ms=50,
                )
            ) as worker,
        ):
            assert dispatcher.target == f"ipc://{dispatcher_path}"
            assert worker.address == f"ipc://{worker_path}"
            ds = zd.Dataset.range(10).apply(
                service.distribute(
                    "distributed_epoch", dispatcher.target, data_transfer_protocol="ipc"
                )
            )
            assert sorted(ints(ds)) == list(range(10))


def test_workers_register_again_with_a_restarted_dispatcher(cluster):
    c = cluster(num_workers=2)
    port = port_of(c.target)
    c.dispatcher.stop()
    # A dispatcher without fault tolerance forgets everything; workers notice at
    # their next heartbeat (NOT_FOUND) and register again, keeping their ports.
    c.dispatcher = service.DispatchServer(service.DispatcherConfig(port=port))
    poll_for(lambda: c.num_registered_workers() == 2)
    ds = zd.Dataset.range(20).apply(service.distribute("distributed_epoch", c.target))
    assert sorted(ints(ds)) == list(range(20))


@pytest.mark.parametrize(
    ("mode", "copies"), [("distributed_epoch", 1), ("parallel_epochs", 3)]
)
def test_ipc_workers_get_their_own_socket_files_removed_on_stop(
    cluster: Any, monkeypatch: pytest.MonkeyPatch, mode: str, copies: int
) -> None:
    with tempfile.TemporaryDirectory(prefix="zd-") as runtime_dir:
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime_dir)
        sockets_dir = os.path.join(runtime_dir, "zmqdata")
        c = cluster(
            num_workers=3,
            dispatcher_options={"protocol": "ipc"},
            data_transfer_protocol="ipc",
        )
        files = sorted(os.listdir(sockets_dir))
        assert len(files) == 4  # the dispatcher's and one per worker
        assert all(f.startswith(f"zmqdata-{os.getpid()}-") for f in files)
        ds = zd.Dataset.range(30).apply(
            service.distribute(mode, c.target, data_transfer_protocol="ipc")
        )
        assert sorted(ints(ds)) == sorted(list(range(30)) * copies)
        c.stop()
        assert os.listdir(sockets_dir) == []


def test_a_worker_that_fails_to_start_never_registers(cluster: Any) -> None:
    c = cluster(num_workers=0)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        metrics_port = taken.getsockname()[1]
        with pytest.raises(errors.UnavailableError, match="metrics"):
            service.WorkerServer(
                service.WorkerConfig(c.target, metrics_port=metrics_port)
            )
    c.add_worker()  # registered after the failed one would have been
    assert c.num_registered_workers() == 1
