"""A paced ``TaskBuffer`` holds about ``AHEAD_S`` of what is taken from it.

What a worker has made and not sent is work no other worker can take over at
the end of an epoch, so on a slow link the buffer stays small; on a fast one
it grows to its ``max_bytes``.
"""

from __future__ import annotations

import pytest

from zmqdata._worker import buffer as b
from zmqdata._worker.buffer import Raw, TaskBuffer

MIB = 2**20
pytestmark = pytest.mark.timeout(10)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fill(buffer: TaskBuffer, count: int, size: int) -> None:
    for _ in range(count):
        buffer.put(Raw(0), size)


def serve(buffer: TaskBuffer, clock: Clock, size: int, rate: float, count: int) -> None:
    """``count`` replies of one ``size``-byte item, taken at ``rate`` bytes/s."""
    for _ in range(count):
        fill(buffer, 1, size)
        clock.now += size / rate
        assert len(buffer.take_covered(1024, None)) == 1


def test_a_paced_buffer_starts_at_the_floor_and_follows_a_slow_link():
    clock = Clock()
    buffer = TaskBuffer(1024, 64 * MIB, paced=True, clock=clock)
    assert buffer.limit_bytes == b.MIN_AHEAD_BYTES
    serve(buffer, clock, MIB // 4, 10e6, count=20)  # 10 MB/s: 1 MB ahead
    assert buffer.limit_bytes == b.MIN_AHEAD_BYTES
    serve(buffer, clock, MIB // 4, 50e6, count=40)  # 50 MB/s: 5 MB ahead
    assert buffer.limit_bytes == pytest.approx(50e6 * b.AHEAD_S, rel=0.05)


def test_a_fast_link_grows_the_limit_to_max_bytes():
    clock = Clock()
    buffer = TaskBuffer(1024, 64 * MIB, paced=True, clock=clock)
    serve(buffer, clock, MIB, 2e9, count=300)  # 2 GB/s: 200 MB ahead
    assert buffer.limit_bytes == 64 * MIB


def test_a_reply_takes_half_the_limit_but_one_item_at_least():
    buffer = TaskBuffer(1024, 64 * MIB, paced=True, clock=Clock())
    fill(buffer, 8, MIB // 4)  # the floor: 2 MiB
    assert len(buffer.take_covered(1024, None)) == 4  # 1 MiB
    huge = TaskBuffer(1024, 64 * MIB, paced=True, clock=Clock())
    fill(huge, 1, 16 * MIB)  # an empty buffer takes one item of any size
    assert len(huge.take_covered(1024, None)) == 1
    fill(buffer, 1, MIB // 4)
    assert len(buffer.take(1024)) == 5  # not a reply: everything


def test_an_unpaced_buffer_keeps_its_max_bytes():
    buffer = TaskBuffer(1024, 8 * MIB, clock=Clock())
    assert buffer.limit_bytes == 8 * MIB
    fill(buffer, 8, MIB)
    assert len(buffer.take_covered(1024, None)) == 8
