"""CurveZMQ: keyed clusters serve keyed clients and refuse everyone else, fast."""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq.auth

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from tests.service.logs import warnings_from
from zmqdata import errors, service
from zmqdata._client import rpc
from zmqdata._runtime import auth
from zmqdata._wire import messages as m
from zmqdata._worker import control as worker_control


class Keys:
    """A server key pair, a client key pair, an intruder's key pair."""

    def __init__(self, root: Path) -> None:
        self.authorized = root / "authorized"
        self.authorized.mkdir()
        for name in ("server", "client", "intruder"):
            (root / name).mkdir()
            zmq.auth.create_certificates(root / name, name)
        for name in ("server", "client"):  # workers use the server key pair
            shutil.copy(root / name / f"{name}.key", self.authorized)
        self.server_secret = str(root / "server" / "server.key_secret")
        self.server_public = str(root / "server" / "server.key")
        self.client_secret = str(root / "client" / "client.key_secret")
        self.intruder_secret = str(root / "intruder" / "intruder.key_secret")

    def worker_options(self, secret: str | None = None) -> dict[str, Any]:
        return {
            "curve_secret_key_file": secret or self.server_secret,
            "curve_authorized_keys_dir": str(self.authorized),
            "dispatcher_public_key_file": self.server_public,
        }

    def dispatcher_options(self) -> dict[str, Any]:
        return {
            "curve_secret_key_file": self.server_secret,
            "curve_authorized_keys_dir": str(self.authorized),
        }


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


def _use(monkeypatch: pytest.MonkeyPatch, secret: str | None, server: str) -> None:
    if secret is None:
        monkeypatch.delenv("ZMQDATA_CURVE_SECRET_KEY_FILE", raising=False)
        monkeypatch.delenv("ZMQDATA_CURVE_SERVER_KEY_FILE", raising=False)
    else:
        monkeypatch.setenv("ZMQDATA_CURVE_SECRET_KEY_FILE", secret)
        monkeypatch.setenv("ZMQDATA_CURVE_SERVER_KEY_FILE", server)


@pytest.fixture
def secured(cluster: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    _use(monkeypatch, keys.client_secret, keys.server_public)
    c: Cluster = cluster(
        num_workers=2,
        dispatcher_options=keys.dispatcher_options(),
        **keys.worker_options(),
    )
    return c


def _auth_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if type(t).__name__ == "AuthenticationThread" and t.is_alive()
    ]


def test_a_keyed_client_reads_every_element(secured: Cluster) -> None:
    ds = zd.Dataset.range(200).apply(
        service.distribute("distributed_epoch", secured.target)
    )
    assert sorted(ints(ds)) == list(range(200))
    assert len(secured.status()["workers"]) == 2


@pytest.mark.parametrize("mode", ["parallel_epochs", "distributed_epoch"])
def test_reads_over_curve_tcp_data_sockets(secured: Cluster, mode: str) -> None:
    # tcp: in-process readers would otherwise use the workers' inproc sockets
    ds = zd.Dataset.range(100).apply(
        service.distribute(mode, secured.target, data_transfer_protocol="tcp")
    )
    copies = 2 if mode == "parallel_epochs" else 1
    assert sorted(ints(ds)) == sorted(list(range(100)) * copies)


def _read_five(target: str) -> list[int]:
    return ints(
        zd.Dataset.range(5).apply(service.distribute("distributed_epoch", target))
    )


@pytest.mark.parametrize("who", ["intruder", "no key"])
def test_a_client_without_an_authorized_key_is_denied_quickly(
    secured: Cluster, keys: Keys, monkeypatch: pytest.MonkeyPatch, who: str
) -> None:
    _use(
        monkeypatch,
        keys.intruder_secret if who == "intruder" else None,
        keys.server_public,
    )
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "30")
    started = time.monotonic()
    with pytest.raises(errors.PermissionDeniedError):
        service.get_status(secured.target)
    with pytest.raises(errors.PermissionDeniedError):
        _read_five(secured.target)
    assert time.monotonic() - started < 10.0  # far inside the 30 s retry budget


def test_a_client_with_the_wrong_server_key_is_denied(
    secured: Cluster, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_server = keys.intruder_secret.replace(".key_secret", ".key")
    _use(monkeypatch, keys.client_secret, wrong_server)
    with pytest.raises(errors.PermissionDeniedError):
        service.get_status(secured.target)


def test_a_worker_with_a_wrong_key_never_registers(
    secured: Cluster, keys: Keys
) -> None:
    secured.add_worker(wait=False, **keys.worker_options(keys.intruder_secret))
    with pytest.raises(AssertionError):
        poll_for(lambda: len(secured.status()["workers"]) > 2, timeout=1.0)


def test_the_authenticator_stops_with_the_last_server(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, keys.client_secret, keys.server_public)
    first = Cluster(
        1, dispatcher_options=keys.dispatcher_options(), **keys.worker_options()
    )
    second = Cluster(
        1, dispatcher_options=keys.dispatcher_options(), **keys.worker_options()
    )
    try:
        assert auth.active()
        assert len(_auth_threads()) == 1
        first.stop()
        assert auth.active()
        assert len(second.status()["workers"]) == 1
    finally:
        first.stop()
        second.stop()
    assert not auth.active()
    assert not _auth_threads()


def test_a_plain_cluster_still_serves_plain_clients(cluster: Any) -> None:
    c = cluster(num_workers=1)
    assert not auth.active()
    ds = zd.Dataset.range(10).apply(service.distribute("distributed_epoch", c.target))
    assert sorted(ints(ds)) == list(range(10))


@pytest.mark.parametrize(
    "config",
    [
        lambda k: service.DispatcherConfig(curve_secret_key_file=k.server_secret),
        lambda k: service.DispatcherConfig(curve_authorized_keys_dir=str(k.authorized)),
        lambda k: service.WorkerConfig(
            "127.0.0.1:1",
            curve_secret_key_file=k.server_secret,
            curve_authorized_keys_dir=str(k.authorized),
        ),
    ],
)
def test_curve_fields_come_together(keys: Keys, config: Any) -> None:
    with pytest.raises(ValueError, match="also requires"):
        config(keys)


def test_unreadable_keys_are_a_value_error(keys: Keys) -> None:
    config = service.DispatcherConfig(
        curve_secret_key_file=keys.server_public,  # no secret in it
        curve_authorized_keys_dir=str(keys.authorized),
    )
    with pytest.raises(ValueError, match="no secret key"):
        service.DispatchServer(config)
    assert not auth.active()


def test_a_reader_refused_by_the_workers_fails_with_permission_denied(
    cluster: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    only_servers = tmp_path / "only-servers"
    only_servers.mkdir()
    shutil.copy(keys.server_public, only_servers)
    _use(monkeypatch, keys.client_secret, keys.server_public)
    c = cluster(
        num_workers=1,
        dispatcher_options=keys.dispatcher_options(),
        **{
            **keys.worker_options(),
            "curve_authorized_keys_dir": str(only_servers),
        },
    )
    # tcp: an in-process reader would use the worker's inproc socket otherwise
    ds = zd.Dataset.range(5).apply(
        service.distribute("distributed_epoch", c.target, data_transfer_protocol="tcp")
    )
    started = time.monotonic()
    with pytest.raises(errors.PermissionDeniedError):
        list(ds)
    assert time.monotonic() - started < 5.0


class _Resetter:
    """A raw TCP peer that accepts connections and resets each one.

    With ``read_first`` it reads the client's ZMTP greeting first, so the reset
    comes in the middle of the handshake.
    """

    def __init__(self, read_first: bool) -> None:
        self.read_first = read_first
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.target = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.resets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            if self.read_first:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    conn.recv(64)
            conn.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            conn.close()  # linger 0: an RST instead of a FIN
            self.resets += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()


@pytest.fixture(params=[False, True], ids=["on-accept", "mid-handshake"])
def resetter(request: pytest.FixtureRequest) -> Any:
    peer = _Resetter(request.param)
    yield peer
    peer.stop()


def test_a_reset_mid_handshake_is_retried_not_denied(resetter: _Resetter) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    monitor = auth.handshake_monitor(sock)
    try:
        sock.connect(resetter.target)

        def reset_and_checked() -> bool:
            if monitor.poll(10):
                auth.check_handshake(monitor, resetter.target)  # must not raise
            return resetter.resets >= 5

        poll_for(reset_and_checked, timeout=5.0)
    finally:
        auth.close_monitor(sock, monitor)
        sock.close(linger=0)


def test_a_plain_call_to_a_resetting_peer_is_unavailable_not_denied(
    resetter: _Resetter,
) -> None:
    with pytest.raises(errors.UnavailableError, match="no answer") as raised:
        rpc.call(resetter.target, m.GetStatus(), m.GetStatusReply, 0.5)
    assert resetter.resets >= 2
    if resetter.read_first:  # closed mid-handshake, as a CURVE server may do
        assert "requires authentication" in raised.value.message


def test_rejected_keys_are_logged_with_the_peer_address(
    secured: Cluster,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _use(monkeypatch, keys.intruder_secret, keys.server_public)
    with pytest.raises(errors.PermissionDeniedError, match="rejected this client"):
        service.get_status(secured.target)
    logged = poll_for(lambda: warnings_from(caplog, "zmqdata.dispatcher"))
    intruder = zmq.auth.load_certificate(keys.intruder_secret)[0].decode()
    assert (
        f"from 127.0.0.1: public key {intruder} is not in {keys.authorized}"
        in logged[0]
    )


def test_a_worker_with_a_rejected_key_warns_naming_the_dispatcher(
    secured: Cluster,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(worker_control, "WARN_AFTER_S", 0.3)
    secured.add_worker(wait=False, **keys.worker_options(keys.intruder_secret))
    found = poll_for(lambda: warnings_from(caplog, "zmqdata.worker"), 5.0)
    assert f"no answer from the dispatcher at {secured.target}" in found[0]
    assert "rejected this client's public key" in found[0]


def test_a_reader_outlives_a_worker_that_resets_mid_handshake(
    cluster: Any, resetter: _Resetter, sockets: Any
) -> None:
    # A "worker" whose data port resets every connection, as one killed while
    # starting does: the read goes on with the real worker, no denial.
    c = cluster(num_workers=1)
    fake = sockets(c.target)
    fake.send(
        m.encode(
            m.RegisterWorker(
                request_id=1,
                worker_address=resetter.target.split("://", 1)[1],
                data_address=resetter.target,
                version=zd.__version__,
            )
        )
    )
    poll_for(lambda: c.num_registered_workers() == 2)
    ds = zd.Dataset.range(50).apply(
        service.distribute("distributed_epoch", c.target, data_transfer_protocol="tcp")
    )
    assert sorted(ints(ds)) == list(range(50))
    assert resetter.resets >= 1
