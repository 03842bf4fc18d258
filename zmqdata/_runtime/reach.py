"""Why a server does not answer, for the warnings of clients and workers.

``diagnose(target)`` tells apart a host name that does not resolve, a refused
connection, an address where nothing accepts in time, and a port that accepts
connections but sends no answer (a busy server, or another program): a
``getaddrinfo`` and one short connect to the target (tcp), or a look at the
socket file (ipc). ``probe(target)`` also says whether nothing can be
there (``Reach.absent``: the name does not resolve, the connection is
refused, the socket file is missing), which a client that never had an answer
from the address takes as a wrong address (``_client/rpc.py``).

>>> diagnose("ipc:///nonexistent/zmqdata.sock")
'socket file /nonexistent/zmqdata.sock does not exist'
>>> probe("ipc:///nonexistent/zmqdata.sock").absent
True
"""

from __future__ import annotations

import os
import socket
from typing import Any, NamedTuple

PROBE_TIMEOUT_S = 1.0


class Reach(NamedTuple):
    """What a probe of an address found."""

    reason: str
    """Why it is silent, in a few words."""
    absent: bool
    """Nothing listens there, or the name does not resolve: no answer can come
    until something starts there (not: a host down, filtered, or busy)."""


def diagnose(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """A short reason why ``target`` (``tcp://host:port`` or ``ipc://path``) is silent.

    Blocks for at most ``timeout_s`` (plus the name lookup).
    """
    return probe(target, timeout_s).reason


def probe(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> Reach:
    """Why ``target`` is silent, and whether nothing is there (as ``diagnose``)."""
    protocol, _, address = target.partition("://")
    if protocol == "ipc":
        if not os.path.exists(address):
            return Reach(f"socket file {address} does not exist", absent=True)
        return _connect(socket.AF_UNIX, address, timeout_s)
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as error:
        return Reach(f"host {host!r} does not resolve ({error})", absent=True)
    family, _, _, _, sockaddr = found[0]
    return _connect(family, sockaddr, timeout_s)


def _connect(family: int, sockaddr: tuple[Any, ...] | str, timeout_s: float) -> Reach:
    attempt = socket.socket(family, socket.SOCK_STREAM)
    attempt.settimeout(timeout_s)
    try:
        attempt.connect(sockaddr)
    except ConnectionRefusedError:
        return Reach("connection refused (nothing listens there)", absent=True)
    except TimeoutError:
        reason = f"no connection within {timeout_s:g} s (host down or filtered)"
        return Reach(reason, absent=False)
    except OSError as error:
        return Reach(f"cannot connect ({error.strerror or error})", absent=False)
    finally:
        attempt.close()
    reason = (
        "it accepts connections but does not answer (busy, or not a zmqdata server)"
    )
    return Reach(reason, absent=False)
