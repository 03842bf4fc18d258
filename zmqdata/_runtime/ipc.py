"""Paths for ``ipc://`` sockets: unique per server, short enough, removed on stop.

A server bound over ipc to a ``host`` that is not a path (no ``/``, like the
default ``127.0.0.1``) binds ``zmqdata-<pid>-<uuid>.sock`` in
``$XDG_RUNTIME_DIR/zmqdata`` (created 0700), else in the temp directory, so
servers on one host never share a socket file. libzmq leaves an ipc socket's
file behind when it closes; ``PollLoop`` removes it with ``remove``.

>>> bind_host("ipc", "/run/d.sock"), bind_host("tcp", "127.0.0.1")
('/run/d.sock', '127.0.0.1')
>>> os.path.basename(bind_host("ipc", "127.0.0.1")).startswith(f"zmqdata-{os.getpid()}-")
True
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid

MAX_PATH_BYTES = 107
"""The longest AF_UNIX socket path Linux accepts (``sun_path`` less its NUL)."""


def _directories() -> list[str]:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    found = []
    if runtime and os.path.isdir(runtime):
        found.append(os.path.join(runtime, "zmqdata"))
    return [*found, tempfile.gettempdir(), "/tmp"]


def bind_host(protocol: str, host: str) -> str:
    """What to bind for ``protocol`` and a configured ``host``.

    For ipc, a ``host`` with a ``/`` is the socket path; any other gets a new
    ``socket_path()``.
    """
    if protocol == "ipc" and "/" not in host:
        return socket_path()
    return host


def socket_path() -> str:
    """A new socket path no other server uses.

    Raises:
        ValueError: If no candidate directory gives a path of at most
            ``MAX_PATH_BYTES`` bytes.
    """
    name = f"zmqdata-{os.getpid()}-{uuid.uuid4().hex}.sock"
    for directory in _directories():
        path = os.path.join(directory, name)
        if len(os.fsencode(path)) <= MAX_PATH_BYTES:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            return path
    raise ValueError(
        f"no directory for the ipc socket {name} gives a path of at most "
        f"{MAX_PATH_BYTES} bytes (tried {', '.join(_directories())})"
    )


def file_id(path: str) -> tuple[int, int] | None:
    """The (device, inode) of the socket file at ``path`` (None if there is none)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def remove(path: str, bound: tuple[int, int] | None) -> None:
    """Removes the socket file at ``path`` if it is still the one we bound."""
    if bound is not None and file_id(path) == bound:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
