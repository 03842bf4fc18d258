"""CurveZMQ roles: worker keys act as workers, client keys read only their tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from click.testing import CliRunner
from zmqdata_cli.main import main

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from tests.service.logs import warnings_from
from tests.service.test_fault_tolerance import restart_dispatcher
from zmqdata import errors, service
from zmqdata._client import rpc
from zmqdata._runtime import auth
from zmqdata._runtime.loop import context
from zmqdata._wire import messages as m
from zmqdata.service import ShardingPolicy

TIMEOUT_S = 5.0


class RoleKeys:
    """docs/security.md's layout, made with ``zmqdata keygen --authorize``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workers, self.clients = root / "workers", root / "clients"
        self._keygen("server", self.workers)  # workers use the server key pair
        self._keygen("alice", self.clients)
        self._keygen("bob", self.clients)

    def _keygen(self, name: str, authorize: Path) -> None:
        args = ["keygen", str(self.root / name), "--name", name]
        result = CliRunner().invoke(main, [*args, "--authorize", str(authorize)])
        assert result.exit_code == 0, result.output

    def secret(self, name: str) -> str:
        return str(self.root / name / f"{name}.key_secret")

    @property
    def server_public(self) -> str:
        return str(self.root / "server" / "server.key")

    def client(self, name: str) -> auth.ClientKeys:
        keys = auth.client_keys(self.secret(name), self.server_public)
        assert keys is not None
        return keys

    def use(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        monkeypatch.setenv("ZMQDATA_CURVE_SECRET_KEY_FILE", self.secret(name))
        monkeypatch.setenv("ZMQDATA_CURVE_SERVER_KEY_FILE", self.server_public)


@pytest.fixture
def keys(tmp_path: Path) -> RoleKeys:
    return RoleKeys(tmp_path)


@pytest.fixture
def roles(cluster: Any, keys: RoleKeys, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    keys.use(monkeypatch, "alice")
    return _roles_cluster(cluster, keys)


def _roles_cluster(
    cluster: Any, keys: RoleKeys, client_timeout_ms: int = 2_000, **options: Any
) -> Cluster:
    """One worker, with docs/security.md's roles and ``options`` for the dispatcher."""
    c: Cluster = cluster(
        num_workers=1,
        client_timeout_ms=client_timeout_ms,
        dispatcher_options={
            "curve_secret_key_file": keys.secret("server"),
            "curve_authorized_keys_dir": str(keys.clients),
            "curve_worker_keys_dir": str(keys.workers),
            **options,
        },
        curve_secret_key_file=keys.secret("server"),
        curve_authorized_keys_dir=str(keys.clients),
        dispatcher_public_key_file=keys.server_public,
    )
    return c


@contextlib.contextmanager
def _dealer(
    target: str, keys: auth.ClientKeys
) -> Iterator[tuple[zmq.Socket[Any], zmq.Socket[Any]]]:
    """A CURVE DEALER connected to ``target``, and its handshake monitor."""
    sock: zmq.Socket[Any] = context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    auth.secure_client(sock, keys)
    monitor = auth.handshake_monitor(sock)
    sock.connect(target)
    try:
        yield sock, monitor
    finally:
        auth.close_monitor(sock, monitor)
        sock.close(linger=0)


def _ask(target: str, keys: auth.ClientKeys, request: m.Message) -> m.Message:
    """``request``'s reply from ``target`` over a raw CURVE DEALER with ``keys``."""
    with _dealer(target, keys) as (sock, _):
        sock.send(m.encode(request))
        assert sock.poll(int(TIMEOUT_S * 1000)), f"no reply to {request.TYPE}"
        return m.decode(sock.recv_multipart()[0])


def _iteration(c: Cluster) -> m.IterationState:
    """An iteration client of an endless dataset, acquired with the current key."""
    dataset_id = service.register_dataset(c.target, zd.Dataset.range(10).repeat())
    job = rpc.call(
        c.target,
        m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=ShardingPolicy.OFF),
        m.GetOrCreateJobReply,
        TIMEOUT_S,
    )
    request = m.GetOrCreateIteration(job_id=job.job_id, repetition=0)
    return rpc.call(c.target, request, m.IterationState, TIMEOUT_S)


def _get_elements(task: dict[str, Any], client_id: int, ticket: bytes) -> m.Message:
    return m.GetElements(
        task_id=task["task_id"], client_id=client_id, max_elements=1, ticket=ticket
    )


@pytest.mark.parametrize(
    "request_",
    [
        m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1"),
        m.WorkerHeartbeat(worker_id=1),
        m.GetSplit(iteration_id=1, repetition=0),
    ],
    ids=lambda r: r.TYPE,
)
def test_a_client_key_cannot_make_worker_requests(
    roles: Cluster, keys: RoleKeys, request_: m.Message
) -> None:
    reply = _ask(roles.target, keys.client("alice"), request_)
    assert isinstance(reply, m.Error)
    assert reply.code == "PERMISSION_DENIED"
    assert "worker key" in reply.message
    assert roles.num_registered_workers() == 1  # only the real one


def test_a_worker_with_a_client_key_never_registers(
    roles: Cluster, keys: RoleKeys, caplog: pytest.LogCaptureFixture
) -> None:
    roles.add_worker(wait=False, curve_secret_key_file=keys.secret("alice"))
    warning = poll_for(lambda: warnings_from(caplog, "zmqdata.worker"))
    assert "PERMISSION_DENIED" in warning[0]
    assert "register_worker needs a worker key" in warning[0]
    assert roles.num_registered_workers() == 1


def test_a_worker_key_cannot_make_client_requests(
    roles: Cluster, keys: RoleKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys.use(monkeypatch, "server")
    with pytest.raises(errors.PermissionDeniedError, match="client key"):
        service.register_dataset(roles.target, zd.Dataset.range(3))
    assert roles.status()["datasets"] == []  # get_status: either role


def test_a_worker_key_cannot_read_a_data_port(roles: Cluster, keys: RoleKeys) -> None:
    [worker] = roles.status()["workers"]
    address = worker["data_address"]
    with _dealer(address, keys.client("server")) as (_, monitor):

        def denied() -> bool:
            try:
                auth.check_handshake(monitor, address)
            except errors.PermissionDeniedError as error:
                return "rejected this client's public key" in error.message
            return False

        assert poll_for(denied, timeout=TIMEOUT_S)


def test_a_secured_read_over_tcp_with_roles(roles: Cluster) -> None:
    ds = zd.Dataset.range(50).apply(
        service.distribute(
            "distributed_epoch", roles.target, data_transfer_protocol="tcp"
        )
    )
    assert sorted(ints(ds)) == list(range(50))


def test_a_coordinated_read_over_tcp_with_roles(roles: Cluster) -> None:
    """Coordinated reads carry the read tickets too."""
    ds = (
        zd.Dataset.range(10)
        .repeat()
        .apply(
            service.distribute(
                "parallel_epochs",
                roles.target,
                job_name="coordinated",
                consumer_index=0,
                num_consumers=1,
                data_transfer_protocol="tcp",
            )
        )
    )
    assert sorted(ints(ds.take(20))) == sorted(list(range(10)) * 2)


def test_a_client_reads_only_the_tasks_it_was_given(
    roles: Cluster, keys: RoleKeys
) -> None:
    state = _iteration(roles)  # alice's iteration client
    [task] = state.tasks
    ticket = task["ticket"]
    address = task["data_address"]

    def alice_reads() -> bool:
        reply = _ask(
            address, keys.client("alice"), _get_elements(task, state.client_id, ticket)
        )
        return isinstance(reply, m.Elements) and reply.count == 1

    assert poll_for(alice_reads, timeout=TIMEOUT_S)
    for bobs_ticket in (b"", ticket):  # none, or alice's
        request = _get_elements(task, state.client_id, bobs_ticket)
        reply = _ask(address, keys.client("bob"), request)
        assert isinstance(reply, m.Error)
        assert reply.code == "PERMISSION_DENIED"
        assert "read ticket" in reply.message


def test_a_client_cannot_take_over_another_keys_iteration_client(
    roles: Cluster, keys: RoleKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _iteration(roles)
    keys.use(monkeypatch, "bob")
    request = m.ClientHeartbeat(client_id=state.client_id)
    release = m.ReleaseIterationClient(client_id=state.client_id)
    for message, reply in ((request, m.IterationState), (release, m.Ok)):
        with pytest.raises(errors.PermissionDeniedError, match="another key"):
            rpc.call(roles.target, message, reply, TIMEOUT_S)
    keys.use(monkeypatch, "alice")  # still alice's, and not released
    again = rpc.call(roles.target, request, m.IterationState, TIMEOUT_S)
    assert again.tasks[0]["ticket"] == state.tasks[0]["ticket"]


def test_a_client_keeps_its_owner_across_a_fault_tolerant_restart(
    cluster: Any, keys: RoleKeys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keys.use(monkeypatch, "alice")
    journal = tmp_path / "journal"
    journal.mkdir()
    c = _roles_cluster(
        cluster,
        keys,
        client_timeout_ms=60_000,  # the raw client below never heartbeats
        work_dir=str(journal),
        fault_tolerant_mode=True,
    )
    state = _iteration(c)  # alice's iteration client, journaled with its owner
    restart_dispatcher(c)
    heartbeat = m.ClientHeartbeat(client_id=state.client_id)
    keys.use(monkeypatch, "bob")  # bob heartbeats it first after the restart
    with pytest.raises(errors.PermissionDeniedError, match="another key"):
        rpc.call(c.target, heartbeat, m.IterationState, TIMEOUT_S)
    keys.use(monkeypatch, "alice")
    again = rpc.call(c.target, heartbeat, m.IterationState, TIMEOUT_S)
    assert again.tasks[0]["ticket"] == state.tasks[0]["ticket"]


def test_a_dispatcher_without_worker_keys_dir_warns_that_roles_are_shared(
    cluster: Any,
    keys: RoleKeys,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys.use(monkeypatch, "alice")
    cluster(
        num_workers=0,
        dispatcher_options={
            "curve_secret_key_file": keys.secret("server"),
            "curve_authorized_keys_dir": str(keys.clients),
        },
    )
    [warning] = warnings_from(caplog, "zmqdata.dispatcher")
    assert "no curve_worker_keys_dir" in warning
    assert str(keys.clients) in warning


def test_worker_keys_dir_needs_the_other_curve_fields(keys: RoleKeys) -> None:
    with pytest.raises(ValueError, match="curve_worker_keys_dir also requires"):
        service.DispatcherConfig(curve_worker_keys_dir=str(keys.workers))
    config = service.DispatcherConfig(
        curve_secret_key_file=keys.secret("server"),
        curve_authorized_keys_dir=str(keys.clients),
        curve_worker_keys_dir=str(keys.root / "missing"),
    )
    with pytest.raises(ValueError, match=r"curve_worker_keys_dir: .*missing"):
        service.DispatchServer(config)
    assert not auth.active()
