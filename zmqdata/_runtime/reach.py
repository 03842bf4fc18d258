"""Why a server does not answer, for the warnings of clients and workers.

``diagnose(target)`` tells apart a host name that does not resolve, a refused
connection, an address where nothing accepts in time, and a port that accepts
connections but sends no answer (a busy server, or another program): a
``getaddrinfo`` and one short connect to the target (tcp), or a look at the
socket file (ipc).

>>> diagnose("ipc:///nonexistent/zmqdata.sock")
'socket file /nonexistent/zmqdata.sock does not exist'
"""

from __future__ import annotations

import os
import socket
from typing import Any

PROBE_TIMEOUT_S = 1.0


def diagnose(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """A short reason why ``target`` (``tcp://host:port`` or ``ipc://path``) is silent.

    Blocks for at most ``timeout_s`` (plus the name lookup).
    """
    protocol, _, address = target.partition("://")
    if protocol == "ipc":
        if not os.path.exists(address):
            return f"socket file {address} does not exist"
        return _probe(socket.AF_UNIX, address, timeout_s)
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as error:
        return f"host {host!r} does not resolve ({error})"
    family, _, _, _, sockaddr = found[0]
    return _probe(family, sockaddr, timeout_s)


def _probe(family: int, sockaddr: tuple[Any, ...] | str, timeout_s: float) -> str:
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        probe.connect(sockaddr)
    except ConnectionRefusedError:
        return "connection refused (nothing listens there)"
    except TimeoutError:
        return f"no connection within {timeout_s:g} s (host down or filtered)"
    except OSError as error:
        return f"cannot connect ({error.strerror or error})"
    finally:
        probe.close()
    return "it accepts connections but does not answer (busy, or not a zmqdata server)"
