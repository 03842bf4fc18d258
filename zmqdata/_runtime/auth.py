"""CurveZMQ authentication: key loading, secured sockets, one ZAP authenticator.

Servers (dispatcher ROUTER, worker data ROUTERs) act as CURVE servers with the
cluster's server key pair; a ``zmq.auth.thread.ThreadAuthenticator`` on the
shared context (one per context, so reference-counted here) admits only the
public keys found in the server's ``authorized_keys_dir`` (and, for the
dispatcher, its ``worker_dir``). Each set of directories gets its own ZAP
domain, so servers with different directories can share a process. Clients
(consumers, and workers towards the dispatcher) act as CURVE clients with their
own key pair and the server's public key.

Roles: the ZAP handler sets each CURVE connection's ZMTP User-Id to the
client's public key (Z85); ``recv_from`` reads it with each message, the
dispatcher checks it against its key sets, and ``read_ticket`` binds a task to
the client key the dispatcher gave it to, which a worker checks per request.

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
import hmac
import logging
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from zmqdata._runtime.loop import context, retry_bind
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata.errors import PermissionDeniedError

logger = logging.getLogger("zmqdata.dispatcher")

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
    """A server's key pair and the directories of the public keys it admits.

    ``authorized_dir`` holds client keys; ``worker_dir`` (the dispatcher's
    ``curve_worker_keys_dir``, None for workers and for configs without it)
    the keys allowed to act as workers.
    """

    public: bytes
    secret: bytes
    authorized_dir: str
    worker_dir: str | None = None

    @property
    def domain(self) -> str:
        dirs = f"{self.authorized_dir}\0{self.worker_dir or ''}"
        digest = hashlib.sha256(dirs.encode()).hexdigest()[:16]
        return f"zmqdata-{digest}"

    @property
    def directories(self) -> str:
        """The directories, for log lines."""
        if self.worker_dir is None:
            return self.authorized_dir
        return f"{self.authorized_dir} or {self.worker_dir}"


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


def _directory(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise ValueError(f"{what}: {path!r} is not a directory")
    return os.path.abspath(path)


def server_keys(
    secret_key_file: str | None,
    authorized_dir: str | None,
    worker_dir: str | None = None,
) -> ServerKeys | None:
    """The server keys of a configuration (``None`` when CURVE is off)."""
    if secret_key_file is None:
        return None
    assert authorized_dir is not None  # the configs require both
    public, secret = _key_pair(secret_key_file, "curve_secret_key_file")
    return ServerKeys(
        public,
        secret,
        _directory(authorized_dir, "curve_authorized_keys_dir"),
        None if worker_dir is None else _directory(worker_dir, "curve_worker_keys_dir"),
    )


def public_keys(directory: str) -> frozenset[str]:
    """The Z85 public keys of the ``*.key`` files in ``directory`` (User-Id form)."""
    return frozenset(key.decode() for key in zmq.auth.load_certificates(directory))


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
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        state.closed_in_a_row += 1
        if state.curve and state.closed_in_a_row >= CLOSED_HANDSHAKES_LIMIT:
            reason = (
                f"the server closed {state.closed_in_a_row} CURVE handshakes "
                "in a row (a wrong server public key?)"
            )
    return reason


def closed_hint(monitor: zmq.Socket[Any]) -> str:
    """For a plain client whose handshakes the server closed: a hint, else "".

    A CURVE server closes a plain client's connection, and when it does so
    before the client has read its greeting (seen with a `zmqdata dispatcher`
    process, about one connection in three), the client sees a closed
    handshake, not a mechanism mismatch: it cannot tell that from a reset, so
    it is no denial, but the error says what it may be.
    """
    state = _handshakes.get(monitor)
    if state is None or state.curve or state.closed_in_a_row == 0:
        return ""
    return (
        f"; it closed {state.closed_in_a_row} handshake(s) of this client, which "
        "has no CURVE keys: if the server requires authentication, set "
        "ZMQDATA_CURVE_SECRET_KEY_FILE and ZMQDATA_CURVE_SERVER_KEY_FILE"
    )


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


# ---------------------------------------------------------------- roles


def recv_from(sock: zmq.Socket[Any], secured: bool) -> tuple[list[bytes], str | None]:
    """One message (``NOBLOCK``) and its sender's public key (Z85).

    The key is None on a plain socket and on an ``inproc://`` link of a CURVE
    server (no handshake: the peer is in this process). Raises ``zmq.Again``
    when no message waits.
    """
    if not secured:
        return sock.recv_multipart(zmq.NOBLOCK), None
    parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
    return [part.bytes for part in parts], _user(parts[-1])


def recv_with_fd(
    sock: zmq.Socket[Any], secured: bool
) -> tuple[list[bytes], str | None, int]:
    """Like ``recv_from``, plus the fd of the connection the message came on.

    The fd (ZeroMQ's, to read ``TCP_INFO`` from, never to close) is -1 where
    there is none (``inproc://``).
    """
    parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
    try:
        fd = int(parts[-1].get(zmq.SRCFD))
    except zmq.ZMQError:
        fd = -1
    user = _user(parts[-1]) if secured else None
    return [part.bytes for part in parts], user, fd


def _user(frame: zmq.Frame) -> str | None:
    """The CURVE User-Id of ``frame``'s sender (None: no handshake)."""
    try:
        return str(frame.get("User-Id"))
    except zmq.ZMQError:
        return None


def read_ticket(secret: bytes, task_id: int, user: str) -> bytes:
    """Proof that the dispatcher gave task ``task_id`` to the client key ``user``.

    An HMAC keyed by the cluster's server secret key, which the dispatcher and
    every worker hold: the dispatcher hands it to the client in the
    ``IterationState`` it answers that key with, the worker recomputes it.
    """
    key = hashlib.sha256(b"zmqdata read ticket\0" + secret).digest()
    text = f"{task_id}:{user}".encode()
    return hmac.new(key, text, hashlib.sha256).digest()[:16]


def may_read(
    keys: ServerKeys | None, user: str | None, task_id: int, ticket: bytes
) -> bool:
    """Whether ``user`` may read ``task_id`` (always, on plain and inproc links)."""
    if keys is None or user is None:
        return True
    return hmac.compare_digest(ticket, read_ticket(keys.secret, task_id, user))


# ---------------------------------------------------------------- authenticator


class _Authenticator(ThreadAuthenticator):
    """The ZAP handler, logging every key it rejects with the peer's address."""

    def __init__(self) -> None:
        super().__init__(context())
        self.directories: dict[str, str] = {}
        """Authorized-keys directories by ZAP domain (for the log lines)."""
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
        _authenticator.directories[keys.domain] = keys.directories
        try:
            _authenticator.configure_curve(
                domain=keys.domain, location=keys.authorized_dir
            )
            if keys.worker_dir is not None:
                _authenticator.certs.setdefault(keys.domain, {}).update(
                    zmq.auth.load_certificates(keys.worker_dir)
                )
        except BaseException:
            _release_locked()
            raise


def _start_authenticator() -> _Authenticator:
    # A just-stopped authenticator's ZAP endpoint is freed asynchronously.
    return retry_bind(_try_authenticator)


def _try_authenticator() -> _Authenticator:
    authenticator = _Authenticator()
    try:
        authenticator.start()
    except zmq.ZMQError:
        if authenticator.zap_socket is not None:
            authenticator.zap_socket.close(linger=0)
        raise
    return authenticator


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
