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

import os
from typing import Any

PROTOCOLS = ("tcp", "ipc")
DISPATCHER_ENV = "ZMQDATA_DISPATCHER"


def dispatcher_target(service: Any) -> str:
    """``parse_target(service)``, or of ``ZMQDATA_DISPATCHER`` when ``service`` is None.

    >>> os.environ["ZMQDATA_DISPATCHER"] = "dhost:5050"
    >>> dispatcher_target(None), dispatcher_target("other:1")
    ('tcp://dhost:5050', 'tcp://other:1')
    >>> del os.environ["ZMQDATA_DISPATCHER"]
    >>> dispatcher_target(None)
    Traceback (most recent call last):
    ...
    ValueError: no dispatcher address (service=None): pass service="host:port" or set ZMQDATA_DISPATCHER
    """
    if service is not None:
        return parse_target(service)
    found = os.environ.get(DISPATCHER_ENV)
    if not found:
        raise ValueError(
            "no dispatcher address (service=None): "
            f'pass service="host:port" or set {DISPATCHER_ENV}'
        )
    return parse_target(found, what=DISPATCHER_ENV)


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
