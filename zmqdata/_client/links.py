"""``Links``: whether a reader's sockets are connected, from socket monitor events.

A worker's data socket long-polls: a healthy worker with a slow pipeline may
not answer for minutes, so silence says nothing. The connection does: a link
is *up* from its completed ZMTP handshake to its disconnection (ZeroMQ
reconnects by itself), and ZMTP heartbeats (``HEARTBEAT_IVL``) disconnect a
peer that stops answering pings, such as a frozen host. A link down for longer
than the reader's worker timeout is unreachable. A failed CURVE handshake
raises ``PermissionDeniedError`` instead of leaving the reader to stall.

``inproc`` links (workers in the reader's own process) have no handshake and
count as always up.

>>> links = Links(timeout_s=5.0)
>>> links.down_for("tcp://127.0.0.1:1", now=0.0)
0.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from zmqdata._runtime import auth

_MAX_PING_S = 2.0


@dataclass
class _Link:
    socket: zmq.Socket[Any]
    endpoint: str
    up: bool
    since: float
    """When the link last went up or down (or was made)."""
    was_up: bool = False


class Links:
    """The monitored links of one reader (used on its fetcher thread only)."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._by_monitor: dict[zmq.Socket[Any], _Link] = {}
        self._by_endpoint: dict[str, _Link] = {}

    def watch(
        self, sock: zmq.Socket[Any], endpoint: str, now: float
    ) -> zmq.Socket[Any]:
        """Monitors ``sock`` (call before it connects); returns the monitor to poll."""
        # Pings find a peer that stopped answering; the timeout stays well
        # inside the reader's worker timeout.
        ping_s = min(_MAX_PING_S, self._timeout_s / 4)
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(1, int(ping_s * 1000)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, int(2 * ping_s * 1000)))
        monitor = auth.handshake_monitor(sock, also=zmq.EVENT_DISCONNECTED)
        link = _Link(sock, endpoint, up=endpoint.startswith("inproc://"), since=now)
        self._by_monitor[monitor] = self._by_endpoint[endpoint] = link
        return monitor

    def __contains__(self, monitor: object) -> bool:
        return monitor in self._by_monitor

    def read(self, monitor: zmq.Socket[Any], now: float) -> list[str]:
        """Applies ``monitor``'s events; returns the endpoints that went down.

        Raises:
            PermissionDeniedError: the CURVE handshake was refused.
        """
        link = self._by_monitor[monitor]
        went_down: list[str] = []
        while True:
            try:
                event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return went_down
            kind = event["event"]
            reason = auth.denial(monitor, kind, event["value"])
            if reason is not None:
                raise auth.denied(link.endpoint, reason)
            if kind not in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
                continue  # a handshake cut short: ZeroMQ reconnects
            up = kind == zmq.EVENT_HANDSHAKE_SUCCEEDED
            if up != link.up:
                link.up, link.since = up, now
                link.was_up = link.was_up or up
                if not up:
                    went_down.append(link.endpoint)

    def lost(self, endpoint: str) -> bool:
        """Whether ``endpoint`` was connected and is not now (it is reconnecting)."""
        link = self._by_endpoint.get(endpoint)
        return link is not None and link.was_up and not link.up

    def down_for(self, endpoint: str, now: float) -> float:
        """Seconds ``endpoint`` has been without a connection (0 while up)."""
        link = self._by_endpoint.get(endpoint)
        return 0.0 if link is None or link.up else now - link.since

    def forget(self, endpoint: str) -> zmq.Socket[Any] | None:
        """Stops watching ``endpoint``; returns its monitor for the caller to close."""
        link = self._by_endpoint.pop(endpoint, None)
        if link is None:
            return None
        for monitor, watched in list(self._by_monitor.items()):
            if watched is link:
                del self._by_monitor[monitor]
                return monitor
        return None

    def close(self) -> None:
        """Closes every monitor."""
        for monitor, link in self._by_monitor.items():
            auth.close_monitor(link.socket, monitor)
        self._by_monitor.clear()
        self._by_endpoint.clear()
