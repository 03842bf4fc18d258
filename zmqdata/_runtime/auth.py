"""CurveZMQ authentication: key loading, secured sockets, one ZAP authenticator.

Servers (dispatcher ROUTER, worker data ROUTERs) act as CURVE servers with the
cluster's server key pair; a ``zmq.auth.thread.ThreadAuthenticator`` on the
shared context (one per context, so reference-counted here) admits only the
public keys found in the server's ``authorized_keys_dir``. Each authorized
directory gets its own ZAP domain, so servers with different directories can
share a process. Clients (consumers, and workers towards the dispatcher) act
as CURVE clients with their own key pair and the server's public key.

CURVE failures are silent on a socket; ``handshake_monitor`` and
``check_handshake`` turn the client's authentication failures into
``PermissionDeniedError``. Other handshake failures (a peer that resets the
connection mid-handshake, e.g. a worker killed as it starts) are retried like
any disconnect. The authenticator logs every key it rejects, with the peer's
address (rate-limited). See docs/security.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from zmqdata._runtime.loop import context
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata.errors import PermissionDeniedError

logger = logging.getLogger(__name__)

HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
CURVE_PROTOCOL_ERRORS: dict[int, str] = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "security mechanism mismatch (one "
    "side uses CURVE keys, the other does not)",
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "CURVE cryptographic failure",
    zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE: "CURVE key exchange failure",
}
CLOSED_HANDSHAKES_LIMIT = 3
"""A CURVE server that cannot decrypt a client's hello (the client has the wrong
server public key) just closes the connection: the client cannot tell that from
a reset. This many in a row, with no handshake succeeding, count as a denial."""


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """A server's key pair and the directory of client public keys it admits."""

    public: bytes
    secret: bytes
    authorized_dir: str

    @property
    def domain(self) -> str:
        digest = hashlib.sha256(self.authorized_dir.encode()).hexdigest()[:16]
        return f"zmqdata-{digest}"


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """A client's key pair and the public key of the server it connects to."""

    public: bytes
    secret: bytes
    server_public: bytes


def _key_pair(path: str, what: str) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{what}: cannot read CURVE key pair {path!r}: {error}"
        ) from None
    if secret is None:
        raise ValueError(
            f"{what}: {path!r} holds no secret key (use the NAME.key_secret file)"
        )
    return public, secret


def _public_key(path: str, what: str) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{what}: cannot read CURVE public key {path!r}: {error}"
        ) from None
    return public


def server_keys(
    secret_key_file: str | None, authorized_dir: str | None
) -> ServerKeys | None:
    """The server keys of a configuration (``None`` when CURVE is off)."""
    if secret_key_file is None:
        return None
    assert authorized_dir is not None  # the configs require both
    public, secret = _key_pair(secret_key_file, "curve_secret_key_file")
    if not os.path.isdir(authorized_dir):
        raise ValueError(
            f"curve_authorized_keys_dir: {authorized_dir!r} is not a directory"
        )
    return ServerKeys(public, secret, os.path.abspath(authorized_dir))


def client_keys(
    secret_key_file: str | None, server_key_file: str | None
) -> ClientKeys | None:
    """A client's keys (``None`` when CURVE is off)."""
    if secret_key_file is None:
        return None
    if server_key_file is None:
        raise ValueError(
            "a CURVE client key pair needs the server's public key file too"
        )
    public, secret = _key_pair(secret_key_file, "client secret key")
    return ClientKeys(public, secret, _public_key(server_key_file, "server public key"))


def secure_server(sock: zmq.Socket[Any], keys: ServerKeys | None) -> None:
    """Makes ``sock`` a CURVE server (before it binds); no-op without keys."""
    if keys is None:
        return
    sock.setsockopt(zmq.ZAP_DOMAIN, keys.domain.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.setsockopt(zmq.CURVE_SERVER, 1)


def secure_client(sock: zmq.Socket[Any], keys: ClientKeys | None) -> None:
    """Makes ``sock`` a CURVE client (before it connects); no-op without keys."""
    if keys is None:
        return
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)


@dataclass(slots=True)
class _Handshakes:
    """What ``check_handshake`` remembers about one monitored socket."""

    curve: bool
    closed_in_a_row: int = 0


_handshakes: weakref.WeakKeyDictionary[zmq.Socket[Any], _Handshakes] = (
    weakref.WeakKeyDictionary()
)


def handshake_monitor(sock: zmq.Socket[Any], also: int = 0) -> zmq.Socket[Any]:
    """A monitor of ``sock``'s handshakes (and of the events in ``also``).

    Call it after ``secure_client`` (it notes whether ``sock`` is a CURVE
    client) and before ``connect``.
    """
    monitor: zmq.Socket[Any] = sock.get_monitor_socket(HANDSHAKE_EVENTS | also)
    monitor.setsockopt(zmq.LINGER, 0)
    _handshakes[monitor] = _Handshakes(sock.getsockopt(zmq.MECHANISM) == zmq.CURVE)
    return monitor


def _rejection(event: int, value: int) -> str | None:
    """Why a handshake event means CURVE authentication failed (None: it does not).

    Args:
        event: A ``zmq.EVENT_HANDSHAKE_*`` monitor event.
        value: Its value (the ZAP status code, or the protocol error code).
    """
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"the server rejected this client's public key (ZAP status {value})"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return CURVE_PROTOCOL_ERRORS.get(value)
    return None


def denial(monitor: zmq.Socket[Any], event: int, value: int) -> str | None:
    """Why ``monitor``'s event means authentication failed (None: it does not).

    Handshakes cut short for other reasons (a reset, a peer that stopped) are
    left to the socket's reconnects, except ``CLOSED_HANDSHAKES_LIMIT`` in a
    row on a CURVE client (the symptom of a wrong server public key).
    """
    state = _handshakes.setdefault(monitor, _Handshakes(curve=False))
    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        state.closed_in_a_row = 0
        return None
    reason = _rejection(event, value)
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and state.curve:
        state.closed_in_a_row += 1
        if state.closed_in_a_row >= CLOSED_HANDSHAKES_LIMIT:
            reason = (
                f"the server closed {state.closed_in_a_row} CURVE handshakes "
                "in a row (a wrong server public key?)"
            )
    return reason


def denied(target: str, reason: str) -> PermissionDeniedError:
    """The error for a failed authentication with ``target``."""
    return PermissionDeniedError(
        f"authentication with {target} failed: {reason}; check the CURVE "
        "keys (ZMQDATA_CURVE_SECRET_KEY_FILE, ZMQDATA_CURVE_SERVER_KEY_FILE) "
        "and that the server authorizes this public key"
    )


def check_handshake(monitor: zmq.Socket[Any], target: str) -> None:
    """Raises ``PermissionDeniedError`` if ``monitor`` reported a failed authentication."""
    while True:
        try:
            frames = monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        parsed = parse_monitor_message(frames)
        reason = denial(monitor, parsed["event"], parsed["value"])
        if reason is not None:
            raise denied(target, reason)


def close_monitor(sock: zmq.Socket[Any], monitor: zmq.Socket[Any]) -> None:
    with contextlib.suppress(zmq.ZMQError):
        sock.disable_monitor()
    monitor.close(linger=0)


# ---------------------------------------------------------------- authenticator


class _Authenticator(ThreadAuthenticator):
    """The ZAP handler, logging every key it rejects with the peer's address."""

    def __init__(self) -> None:
        super().__init__(context())
        self.directories: dict[str, str] = {}
        """Authorized-keys directory by ZAP domain (for the log lines)."""
        self._peer = ""
        self._rejected = RateLimitedLog(logger)

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        # ZAP request frames: version, request id, domain, address, ...
        self._peer = msg[3].decode(errors="replace") if len(msg) > 3 else "?"
        await super().handle_zap_message(msg)

    async def _authenticate_curve(
        self, domain: str, client_key: bytes
    ) -> tuple[bool, bytes]:
        allowed, reason = await super()._authenticate_curve(domain, client_key)
        if not allowed:
            self._rejected.warning(
                "rejected a CURVE handshake from %s: public key %s is not in %s",
                self._peer,
                z85.encode(client_key).decode(),
                self.directories.get(domain, domain),
            )
        return allowed, reason


_lock = threading.Lock()
_authenticator: _Authenticator | None = None
_users = 0


def acquire(keys: ServerKeys | None) -> None:
    """Starts (or shares) the context's authenticator and admits ``keys``' directory."""
    global _authenticator, _users
    if keys is None:
        return
    with _lock:
        if _authenticator is None:
            _authenticator = _start_authenticator()
        _users += 1
        _authenticator.directories[keys.domain] = keys.authorized_dir
        try:
            _authenticator.configure_curve(
                domain=keys.domain, location=keys.authorized_dir
            )
        except BaseException:
            _release_locked()
            raise


def _start_authenticator() -> _Authenticator:
    # A just-stopped authenticator's ZAP endpoint is freed asynchronously.
    deadline = time.monotonic() + 5.0
    while True:
        authenticator = _Authenticator()
        try:
            authenticator.start()
            return authenticator
        except zmq.ZMQError as error:
            if authenticator.zap_socket is not None:
                authenticator.zap_socket.close(linger=0)
            if error.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise
            threading.Event().wait(0.02)


def release(keys: ServerKeys | None) -> None:
    """Undoes one ``acquire``; the last one stops the authenticator thread."""
    if keys is None:
        return
    with _lock:
        _release_locked()


def _release_locked() -> None:
    global _authenticator, _users
    _users -= 1
    if _users <= 0 and _authenticator is not None:
        authenticator, _authenticator, _users = _authenticator, None, 0
        authenticator.stop()


def active() -> bool:
    """Whether an authenticator is running (for tests)."""
    return _authenticator is not None
