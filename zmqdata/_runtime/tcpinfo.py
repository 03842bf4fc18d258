"""What the kernel knows about a TCP connection: Linux ``TCP_INFO``, read by fd.

:func:`read` reads the few ``struct tcp_info`` fields (``linux/tcp.h``) that
tell how fast a connection carries data: bytes acknowledged by the peer, and
the time the connection was busy sending (``tcpi_busy_time``, which counts in
the time it was limited by the peer's receive window or the send buffer too).
Anything else (not Linux, not TCP, an old kernel, a closed fd) reads as None.

The fd is borrowed: it is wrapped, queried and detached, never closed.

>>> import socket
>>> with socket.create_server(("127.0.0.1", 0)) as server:
...     info = read(server.fileno())
>>> info is None or info.bytes_acked >= 0
True
"""

from __future__ import annotations

import socket
import struct
from typing import Final, NamedTuple

__all__ = ["TcpInfo", "parse", "read"]

_SIZE: Final = 192
"""Bytes of ``struct tcp_info`` up to ``tcpi_sndbuf_limited`` (Linux >= 4.10)."""
_BYTES_ACKED: Final = struct.Struct("=Q")
_BYTES_ACKED_AT: Final = 120
_NOTSENT: Final = struct.Struct("=I")
_NOTSENT_AT: Final = 144
_RATES: Final = struct.Struct("=QQQQ")
_RATES_AT: Final = 160  # delivery_rate, busy_time, rwnd_limited, sndbuf_limited
_TCP_INFO: Final = getattr(socket, "TCP_INFO", None)


class TcpInfo(NamedTuple):
    """The fields of ``struct tcp_info`` a link rate is measured from."""

    bytes_acked: int
    """Payload bytes the peer acknowledged (``tcpi_bytes_acked``)."""
    busy_us: int
    """Microseconds with data in flight or waiting to go (``tcpi_busy_time``);
    counted in jiffies, so short bursts may read as 0."""
    rwnd_limited_us: int = 0
    """Of ``busy_us``, the time the peer's receive window held the sender back."""
    sndbuf_limited_us: int = 0
    """Of ``busy_us``, the time the send buffer held the sender back."""
    delivery_rate: int = 0
    """The last delivery-rate sample, bytes/s (``tcpi_delivery_rate``)."""
    notsent_bytes: int = 0
    """Bytes written by the application and not yet sent."""

    @property
    def link_us(self) -> int:
        """Busy time the link itself set the pace (not a slow reader)."""
        return self.busy_us - self.rwnd_limited_us


def parse(raw: bytes) -> TcpInfo | None:
    """The fields of a ``TCP_INFO`` answer (None if it is too short to hold them).

    >>> parse(bytes(100)) is None
    True
    >>> parse(bytes(232)).bytes_acked
    0
    """
    if len(raw) < _SIZE:
        return None
    (acked,) = _BYTES_ACKED.unpack_from(raw, _BYTES_ACKED_AT)
    (notsent,) = _NOTSENT.unpack_from(raw, _NOTSENT_AT)
    delivery, busy, rwnd, sndbuf = _RATES.unpack_from(raw, _RATES_AT)
    return TcpInfo(acked, busy, rwnd, sndbuf, delivery, notsent)


def read(fd: int) -> TcpInfo | None:
    """The ``TCP_INFO`` of the connected TCP socket ``fd`` (None: not known).

    ``fd`` stays open: it belongs to the caller (e.g. to ZeroMQ's I/O thread).
    """
    if _TCP_INFO is None or fd < 0:
        return None
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
    except OSError:
        return None
    finally:
        sock.detach()
    return parse(raw)
