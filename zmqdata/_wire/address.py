"""Service addresses: ``"[protocol://]host:port"`` strings or ``(protocol, address)``.

>>> parse_target("localhost:5050")
'tcp://localhost:5050'
>>> parse_target(("ipc", "/run/zmqdata/d.sock"))
'ipc:///run/zmqdata/d.sock'
>>> parse_target("grpc://h:1")
Traceback (most recent call last):
...
ValueError: service address 'grpc://h:1': protocol 'grpc' is not supported (use tcp or ipc)
"""

from __future__ import annotations

from typing import Any

PROTOCOLS = ("tcp", "ipc")


def parse_target(service: Any, *, what: str = "service address") -> str:
    """Validates ``service`` and returns it as a ZeroMQ endpoint ``proto://address``."""
    if isinstance(service, tuple):
        if len(service) != 2 or not all(isinstance(p, str) for p in service):
            raise ValueError(
                f"{what} {service!r}: expected a (protocol, address) tuple of str"
            )
        return parse_target(f"{service[0]}://{service[1]}", what=what)
    if not isinstance(service, str):
        raise ValueError(f"{what} must be a str, got {service!r}")
    if service.count("://") > 1:
        raise ValueError(f"{what} {service!r}: more than one '://'")
    protocol, _, address = service.rpartition("://")
    protocol = protocol or "tcp"
    _check_address(service, protocol, address, what)
    return f"{protocol}://{address}"


def _check_address(service: str, protocol: str, address: str, what: str) -> None:
    """Raises ``ValueError`` naming ``service`` unless protocol and address fit."""
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"{what} {service!r}: protocol {protocol!r} is not supported (use tcp or ipc)"
        )
    if not address:
        raise ValueError(f"{what} {service!r}: the address is empty")
    if protocol == "tcp":
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"{what} {service!r}: expected host:port with a port in 1-65535"
            )
