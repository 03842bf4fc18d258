"""How fast each consumer's TCP connection carries data, measured by the kernel.

A ``LinkMeter`` turns successive ``TCP_INFO`` readings of one connection into a
link rate: bytes the peer acknowledged per second the link was busy sending
(``tcpi_busy_time`` less the time a slow reader's receive window held it
back). That is the link's own throughput while it had data to carry, however
fast or slowly the pipeline fills it. A window closes once it holds
``MIN_BUSY_S`` of busy time, or after ``MAX_WINDOW_S``. The kernel counts busy
time in jiffies (1-10 ms), so a window of short bursts reads as little busy
time: it says at least ``bytes / BUSY_FLOOR_S``, a lower bound far above what
such a lightly used link carried. Windows are smoothed with an EWMA.

``PeerLinks`` keeps one meter per connection fd (the data loop's, read at
most every ``READ_EVERY_S``) and which fd each peer's requests come on; an fd
that is not TCP (ipc) reads as unknown.

>>> meter = LinkMeter()
>>> meter.sample(0.0, TcpInfo(bytes_acked=0, busy_us=0))
>>> meter.sample(0.5, TcpInfo(bytes_acked=2_500_000, busy_us=100_000))
25000000.0
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from zmqdata._runtime import tcpinfo
from zmqdata._runtime.tcpinfo import TcpInfo

MIN_BUSY_S: Final = 0.1
BUSY_FLOOR_S: Final = 0.02
MAX_WINDOW_S: Final = 1.0
READ_EVERY_S: Final = 0.05
FORGET_AFTER_S: Final = 30.0
MAX_PEERS: Final = 4096
"""Peers remembered at most (more: all are forgotten, and measured again)."""
SMOOTHING: Final = 0.5
"""Weight of a new window in the EWMA."""


class LinkMeter:
    """The link rate of one connection, from its ``TCP_INFO`` readings (pure)."""

    __slots__ = ("_base", "_base_at", "rate", "read_at")

    def __init__(self) -> None:
        self._base: TcpInfo | None = None
        self._base_at = 0.0
        self.rate: float | None = None
        """Smoothed link rate, bytes/s (None until a window closed)."""
        self.read_at = float("-inf")

    def sample(self, now: float, info: TcpInfo) -> float | None:
        """Feeds one reading taken at ``now``; returns the rate, once known."""
        self.read_at = now
        base = self._base
        if (
            base is None
            or info.bytes_acked < base.bytes_acked
            or info.link_us < base.link_us
        ):  # first reading, or a new connection on a reused fd
            self._base, self._base_at = info, now
            return self.rate
        busy_s = (info.link_us - base.link_us) / 1e6
        if busy_s < MIN_BUSY_S and now - self._base_at < MAX_WINDOW_S:
            return self.rate
        acked = info.bytes_acked - base.bytes_acked
        self._base, self._base_at = info, now
        if acked > 0:
            window = acked / max(busy_s, BUSY_FLOOR_S)
            old = self.rate
            self.rate = window if old is None else old + SMOOTHING * (window - old)
        return self.rate


class PeerLinks:
    """The data loop's view of its readers' links: one meter per connection fd.

    ``heard`` notes the connection (fd) a peer's request came on; ``rate`` is
    that connection's link rate, from ``TCP_INFO`` read at most every
    ``READ_EVERY_S``. Not a TCP connection (ipc, inproc: fd -1) reads as None.
    """

    def __init__(
        self,
        read: Callable[[int], TcpInfo | None] = tcpinfo.read,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read, self._clock = read, clock
        self._meters: dict[int, LinkMeter] = {}
        self._peers: dict[bytes, tuple[int, float]] = {}

    def heard(self, peer: bytes, fd: int) -> None:
        """``peer``'s request came on connection ``fd`` (-1: not known)."""
        if peer not in self._peers and len(self._peers) >= MAX_PEERS:
            self._peers.clear()  # a flood of identities allocates no more
        self._peers[peer] = (fd, self._clock())

    def rate(self, peer: bytes) -> float | None:
        """The link rate of ``peer``'s connection, wire bytes/s (None: not known)."""
        fd = self._peers.get(peer, (-1, 0.0))[0]
        if fd < 0:
            return None
        now = self._clock()
        meter = self._meters.get(fd)
        if meter is None:
            meter = self._meters[fd] = LinkMeter()
        elif now - meter.read_at < READ_EVERY_S:
            return meter.rate
        info = self._read(fd)
        if info is None:
            meter.read_at, meter.rate = now, None
            return None
        return meter.sample(now, info)

    def prune(self) -> None:
        """Forgets peers not heard from, and meters not read, for ``FORGET_AFTER_S``."""
        cutoff = self._clock() - FORGET_AFTER_S
        for peer in [p for p, (_, at) in self._peers.items() if at < cutoff]:
            del self._peers[peer]
        for fd in [fd for fd, meter in self._meters.items() if meter.read_at < cutoff]:
            del self._meters[fd]
