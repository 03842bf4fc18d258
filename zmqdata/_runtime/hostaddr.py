"""Which address a worker advertises: never the wildcard it binds.

A data socket bound to ``0.0.0.0`` (or ``*``) listens on every
interface, but ``tcp://0.0.0.0:5051`` is no address a consumer on another host
can dial. Unless ``worker_address`` says otherwise, the worker advertises the
local address of the interface that routes to its dispatcher: the address the
dispatcher (and so, in the common case, the trainers) can reach it at. Like
dask's ``get_ip``, but aimed at the dispatcher, never at an outside host; the
UDP ``connect`` used to ask the kernel for the route sends no packet.

>>> advertise("tcp://0.0.0.0:5051", "tcp://127.0.0.1:5050", None)
('127.0.0.1:5051', 'tcp://127.0.0.1:5051')
>>> advertise("tcp://0.0.0.0:5051", "tcp://127.0.0.1:5050", "worker-0:5051")
('worker-0:5051', 'tcp://worker-0:5051')
>>> advertise("ipc:///run/w.sock", "ipc:///run/d.sock", None)
('/run/w.sock', 'ipc:///run/w.sock')
"""

from __future__ import annotations

import socket

from zmqdata.errors import UnavailableError

# The sockets are IPv4 (ZMQ_IPV6 stays off), so are the addresses advertised.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "*"})
LOOPBACK = "127.0.0.1"


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` means "every interface".

    >>> is_wildcard("0.0.0.0"), is_wildcard("*"), is_wildcard("10.0.0.7")
    (True, True, False)
    """
    return host in WILDCARD_HOSTS


def route_address(dispatcher_endpoint: str) -> str:
    """This host's address on the route to the dispatcher.

    ``127.0.0.1`` for a dispatcher that is not on TCP (ipc: it, and so its
    trainers, are on this host). Raises ``UnavailableError`` naming the
    dispatcher host if it does not resolve or no route leads to it.

    >>> route_address("tcp://127.0.0.1:5050"), route_address("ipc:///run/d.sock")
    ('127.0.0.1', '127.0.0.1')
    """
    protocol, _, address = dispatcher_endpoint.partition("://")
    if protocol != "tcp":
        return LOOPBACK
    host, _, port = address.rpartition(":")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, int(port), socket.AF_INET, socket.SOCK_DGRAM
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.connect(sockaddr)  # UDP: picks a route, sends nothing
            local: str = probe.getsockname()[0]
    except OSError as error:
        raise UnavailableError(
            f"cannot find this host's address on the route to the dispatcher "
            f"host {host!r}: {error}; set worker_address (--worker-address)"
        ) from None
    return local


def advertise(
    bound_endpoint: str, dispatcher_endpoint: str, worker_address: str | None
) -> tuple[str, str]:
    """``(worker_address, data_address)`` a worker registers.

    Args:
        bound_endpoint: The data socket's real endpoint (e.g. ``tcp://0.0.0.0:5051``).
        dispatcher_endpoint: The dispatcher's endpoint (``tcp://host:port``).
        worker_address: The configured ``host:port`` to advertise, or None.

    Returns:
        The ``host:port`` the worker is known by, and the endpoint consumers
        dial: ``tcp://`` + that address for TCP, ``bound_endpoint`` otherwise.
    """
    protocol, _, bound = bound_endpoint.partition("://")
    if protocol != "tcp":
        return worker_address or bound, bound_endpoint
    if worker_address is None:
        host, _, port = bound.rpartition(":")
        if is_wildcard(host):
            host = route_address(dispatcher_endpoint)
        worker_address = f"{host}:{port}"
    return worker_address, f"tcp://{worker_address}"
