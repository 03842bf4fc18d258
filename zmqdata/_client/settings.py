"""Client knobs, read from the environment when a reader starts (or a call is made).

| variable | default | meaning |
|---|---|---|
| ``ZMQDATA_DISPATCHER_TIMEOUT_S`` | 60 | how long to keep retrying an unreachable dispatcher |
| ``ZMQDATA_DISPATCHER_FIRST_CONTACT_S`` | 5 | how long an address that never answered this process may refuse (or not resolve) before ``UnavailableError`` |
| ``ZMQDATA_CLIENT_HEARTBEAT_MS`` | 100 | how often a reader reports to the dispatcher |
| ``ZMQDATA_WORKER_TIMEOUT_S`` | 60 | how long a reader waits for a worker it cannot connect to before ``UnavailableError`` |
| ``ZMQDATA_CURVE_SECRET_KEY_FILE`` | unset | this client's CURVE key pair (``NAME.key_secret``) |
| ``ZMQDATA_CURVE_SERVER_KEY_FILE`` | unset | the cluster's server public key (``NAME.key``) |

A dispatcher address that has never answered this process and still refuses
connections (or does not resolve) after ``ZMQDATA_DISPATCHER_FIRST_CONTACT_S``
is taken for a wrong address: ``UnavailableError`` then, not after the full
timeout. One that answered before (a dispatcher restarting) is retried for
``ZMQDATA_DISPATCHER_TIMEOUT_S``, as is an address that accepts connections
but is silent. Raise the first (e.g. to 60) where trainers may start well
before their dispatcher.

A reader fails with ``UnavailableError`` naming the worker when a worker it
reads from has had no connection for ``ZMQDATA_WORKER_TIMEOUT_S`` (its address
refuses or drops connections, or never completes a handshake; ZMTP pings every
``min(2 s, timeout / 4)`` drop a peer that stops answering). A connected
worker may take as long as its pipeline needs: the timeout never fires on a
slow element alone. While a worker is disconnected, the reader's credit goes
to the others. Keep it above the dispatcher's ``worker_timeout_ms`` (10 s by
default), so that a removed worker's task is dropped before the reader gives up
on it.

With both CURVE variables set, every socket to the dispatcher and the workers
is a CurveZMQ client (see docs/security.md); set neither for a plain cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from zmqdata._runtime import auth


@dataclass(frozen=True, slots=True)
class ClientSettings:
    dispatcher_timeout_s: float = 60.0
    first_contact_s: float = 5.0
    heartbeat_s: float = 0.1
    worker_timeout_s: float = 60.0
    curve_secret_key_file: str | None = None
    curve_server_key_file: str | None = None

    def keys(self) -> auth.ClientKeys | None:
        """The CURVE client keys (``None``: connect without CURVE)."""
        return auth.client_keys(self.curve_secret_key_file, self.curve_server_key_file)


def _read(name: str, default: float, scale: float = 1.0) -> float:
    """``name``'s value (or ``default``, in the same unit) times ``scale``."""
    text = os.environ.get(name)
    if text is None:
        return default * scale
    try:
        value = float(text) * scale
    except ValueError:
        raise ValueError(f"{name} must be a number, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {text!r}")
    return value


def current() -> ClientSettings:
    """The settings in force now."""
    return ClientSettings(
        dispatcher_timeout_s=_read("ZMQDATA_DISPATCHER_TIMEOUT_S", 60.0),
        first_contact_s=_read("ZMQDATA_DISPATCHER_FIRST_CONTACT_S", 5.0),
        heartbeat_s=_read("ZMQDATA_CLIENT_HEARTBEAT_MS", 100.0, scale=1e-3),
        worker_timeout_s=_read("ZMQDATA_WORKER_TIMEOUT_S", 60.0),
        curve_secret_key_file=_path("ZMQDATA_CURVE_SECRET_KEY_FILE"),
        curve_server_key_file=_path("ZMQDATA_CURVE_SERVER_KEY_FILE"),
    )


def _path(name: str) -> str | None:
    return os.environ.get(name) or None
