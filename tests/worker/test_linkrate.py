"""Link rates from ``TCP_INFO``: the pure meter, and real readings on loopback."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator

import pytest
import zmq

from zmqdata._runtime import auth, tcpinfo
from zmqdata._runtime.tcpinfo import TcpInfo
from zmqdata._worker.linkrate import (
    BUSY_FLOOR_S,
    FORGET_AFTER_S,
    MAX_PEERS,
    MAX_WINDOW_S,
    LinkMeter,
    PeerLinks,
)

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="TCP_INFO is read on Linux only"
)


def test_a_window_closes_on_busy_time_and_excludes_a_slow_reader() -> None:
    meter = LinkMeter()
    assert meter.sample(0.0, TcpInfo(1_000, 50_000)) is None
    assert meter.sample(0.05, TcpInfo(2_000_000, 100_000)) is None  # 50 ms busy
    # 300 ms busy, 100 ms of it held back by the reader's window: 200 ms of link.
    rate = meter.sample(0.3, TcpInfo(5_001_000, 350_000, rwnd_limited_us=100_000))
    assert rate == pytest.approx(5_000_000 / 0.2)


def test_an_idle_window_says_a_lower_bound_after_max_window() -> None:
    meter = LinkMeter()
    meter.sample(0.0, TcpInfo(0, 0))
    assert meter.sample(MAX_WINDOW_S / 2, TcpInfo(10_000_000, 0)) is None
    assert meter.sample(MAX_WINDOW_S, TcpInfo(10_000_000, 0)) == pytest.approx(
        10_000_000 / BUSY_FLOOR_S
    )


def test_windows_are_smoothed_and_a_reused_fd_starts_over() -> None:
    meter = LinkMeter()
    meter.sample(0.0, TcpInfo(0, 0))
    meter.sample(1.0, TcpInfo(10_000_000, 1_000_000))  # 10 MB/s
    assert meter.sample(2.0, TcpInfo(40_000_000, 2_000_000)) == pytest.approx(20e6)
    assert meter.sample(3.0, TcpInfo(5, 0)) == pytest.approx(20e6)  # a new connection
    assert meter.sample(4.0, TcpInfo(10_000_005, 500_000)) == pytest.approx(20e6)


def test_peer_links_read_each_fd_at_most_every_read_interval() -> None:
    now = [0.0]
    reads: list[int] = []
    acked = [0]

    def read(fd: int) -> TcpInfo | None:
        reads.append(fd)
        acked[0] += 1_000_000
        return None if fd == 9 else TcpInfo(acked[0], int(now[0] * 1e6))

    links = PeerLinks(read=read, clock=lambda: now[0])
    links.heard(b"a", 7)
    links.heard(b"ipc", 9)
    links.heard(b"inproc", -1)
    assert links.rate(b"a") is None
    assert links.rate(b"a") is None
    assert reads == [7]
    now[0] = 0.5
    assert links.rate(b"a") == pytest.approx(2e6)  # 1 MB in 0.5 s of busy time
    assert links.rate(b"ipc") is None
    assert links.rate(b"inproc") is None
    assert links.rate(b"never heard") is None
    assert reads == [7, 7, 9]
    now[0] = FORGET_AFTER_S + 1
    links.prune()
    assert links.rate(b"a") is None


@pytest.fixture
def loopback() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    context = zmq.Context()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield router, dealer
    finally:
        router.close(linger=0)
        dealer.close(linger=0)
        context.term()


@linux
@pytest.mark.timeout(20)
def test_tcp_info_of_a_real_loopback_connection(loopback) -> None:
    router, dealer = loopback
    dealer.send(b"hello")
    assert router.poll(5_000)
    (peer, payload), user, fd = auth.recv_with_fd(router, secured=False)
    assert payload == b"hello"
    assert user is None
    assert fd >= 0
    before = tcpinfo.read(fd)
    assert before is not None
    count, size = 200, 1 << 20
    receiver = threading.Thread(target=lambda: [dealer.recv() for _ in range(count)])
    receiver.start()
    blob = bytes(size)
    for _ in range(count):
        router.send_multipart([peer, blob])
    receiver.join(10)
    after = tcpinfo.read(fd)
    assert after is not None
    assert after.bytes_acked - before.bytes_acked >= count * size
    assert after.busy_us >= after.rwnd_limited_us >= 0
    # The fd is ZeroMQ's and still open: the connection still works.
    dealer.send(b"again")
    assert router.poll(5_000)
    assert router.recv_multipart()[1] == b"again"


def test_tcp_info_of_what_is_not_a_tcp_connection_is_none() -> None:
    assert tcpinfo.read(-1) is None
    left, right = socket.socketpair()
    with left, right:
        assert tcpinfo.read(left.fileno()) is None
        left.send(b"x")  # still open: read() only borrowed it
        assert right.recv(1) == b"x"
    assert tcpinfo.parse(bytes(100)) is None


def test_peer_links_remember_a_bounded_number_of_peers() -> None:
    links = PeerLinks(read=lambda fd: TcpInfo(0, 0), clock=lambda: 0.0)
    for i in range(MAX_PEERS * 3):
        links.heard(i.to_bytes(4, "big"), i % 100)
    assert len(links._peers) <= MAX_PEERS
