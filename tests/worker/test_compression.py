"""``CompressionPolicy``: compress only where the link, not the producer, is the limit.

Pure logic on a fake clock: rates are fed as numbers, as the producer thread
(``produced``, ``compressed``) and the data loop (``link``) feed them.
"""

from __future__ import annotations

import numpy as np
import pytest

from zmqdata._wire import frames
from zmqdata._worker.compression import (
    LINK_TTL_S,
    PROBE_EVERY_S,
    CompressionPolicy,
    Rate,
    TaskCompression,
)

MB = 1_000_000


def policy_with(
    produce: float = 500 * MB,
    zstd: float = 400 * MB,
    ratio: float = 0.5,
    link: float | None = None,
) -> CompressionPolicy:
    """A policy that has measured these rates (bytes/s) at time 0."""
    policy = CompressionPolicy()
    policy.produced(int(produce), 1.0)
    policy.compressed(int(zstd), int(zstd * ratio), 1.0, now=0.0)
    if link is not None:
        policy.link("peer", link, now=0.0)
    return policy


def decisions(policy: CompressionPolicy, start: float, count: int) -> list[bool]:
    """``should_compress`` every 10 ms from ``start``."""
    return [policy.should_compress(start + i * 0.01) for i in range(count)]


def test_a_fast_link_never_compresses_nor_probes() -> None:
    policy = CompressionPolicy()
    policy.produced(500 * MB, 1.0)
    policy.link("peer", 3_000 * MB, now=0.0)  # loopback: GB/s
    assert not any(decisions(policy, 0.0, 500))
    assert policy.compressed_elements == 0
    assert policy.stats(1.0)["compressing"] is False


def test_an_unknown_link_never_compresses() -> None:
    policy = policy_with(link=None)  # ipc, inproc, not Linux, not measured yet
    assert not any(decisions(policy, 0.0, 500))
    policy.link("peer", 10 * MB, now=5.0)
    policy.link("peer", None, now=5.0)  # the connection stopped being TCP-known
    assert not policy.should_compress(5.0)


def test_a_slow_link_probes_then_compresses() -> None:
    policy = CompressionPolicy()
    policy.produced(500 * MB, 1.0)
    policy.link("peer", 25 * MB, now=0.0)  # 200 Mbit/s
    assert policy.should_compress(0.0)  # a probe: zstd's rate is not known
    assert not policy.compressing
    assert not policy.should_compress(0.01)  # one probe at a time
    policy.compressed(2 * MB, 1 * MB, 0.005, now=0.01)
    assert all(decisions(policy, 0.02, 100))
    assert policy.compressing


def test_it_stops_when_the_link_gets_fast_and_comes_back_when_slow() -> None:
    policy = policy_with(link=25 * MB)
    assert policy.should_compress(0.1)
    policy.link("peer", 5_000 * MB, now=1.0)
    assert not any(decisions(policy, 1.0, 50))
    policy.link("peer", 20 * MB, now=2.0)
    assert all(decisions(policy, 2.0, 50))


def test_incompressible_data_is_not_compressed_on_a_slow_link() -> None:
    policy = policy_with(link=25 * MB, ratio=0.97)
    assert not policy.should_compress(0.5)
    assert not policy.compressing


def test_a_slow_producer_is_the_limit_not_the_link() -> None:
    # The pipeline makes 10 MB/s; a 25 MB/s link carries that raw.
    policy = policy_with(produce=10 * MB, link=25 * MB)
    assert not any(decisions(policy, 0.0, 500))


def test_hysteresis_holds_a_decision_near_the_threshold() -> None:
    # Gain = min(P*C/(P+C), L/r) / min(P, L) = (L/0.87) / L = 1.15: between the
    # OFF (1.05) and ON (1.2) gains, so the decision stays what it was.
    off = policy_with(link=25 * MB, ratio=0.87)
    assert not any(decisions(off, 0.5, 100))
    on = policy_with(link=25 * MB, ratio=0.5)
    assert on.should_compress(0.5)
    on.compressed(1 * MB, 870_000, 0.0025, now=0.5)  # the data got less compressible
    for _ in range(20):
        on.compressed(1 * MB, 870_000, 0.0025, now=0.5)
    assert on.stats(0.5)["compression_ratio"] == pytest.approx(0.87, abs=0.01)
    assert all(decisions(on, 0.5, 100))
    on.link("peer", 300 * MB, now=1.5)  # compressing is slower now: off
    assert not on.should_compress(1.5)


def test_the_slowest_fresh_link_decides_and_stale_links_are_forgotten() -> None:
    policy = policy_with(link=5_000 * MB)
    policy.link("slow", 25 * MB, now=0.0)
    assert policy.should_compress(0.1)
    policy.link("peer", 5_000 * MB, now=LINK_TTL_S)  # "slow" went quiet
    assert not policy.should_compress(LINK_TTL_S + 1)


def test_probes_take_a_small_share_of_the_producer_time() -> None:
    policy = CompressionPolicy()
    policy.produced(500 * MB, 1.0)
    policy.link("peer", 25 * MB, now=0.0)
    # Incompressible: probing goes on, never more than once per PROBE_EVERY_S,
    # nor more than 2% of the time a probe takes.
    probes = []
    now = 0.0
    while now < 10.0:
        if policy.should_compress(now):
            probes.append(now)
            policy.compressed(2 * MB, 2 * MB, 0.05, now=now)  # 50 ms each
        now += 0.01
    gaps = np.diff(probes)
    assert len(probes) >= 2
    assert gaps.min() >= max(PROBE_EVERY_S, 0.05 / 0.02) - 0.011


def test_rate_averages_over_windows() -> None:
    rate = Rate(window_s=1.0)
    for _ in range(3):
        rate.add(1_000, 0.25)
    assert rate.value is None
    rate.add(1_000, 0.25)
    assert rate.value == pytest.approx(4_000)
    for _ in range(100):
        rate.add(500, 1.0)
    assert rate.value == pytest.approx(500, rel=0.01)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_task_compression_encodes_each_way_and_both_decode() -> None:
    clock = FakeClock()
    task = TaskCompression(level=1, clock=clock)
    element = np.zeros(1_000_000, np.float32)
    raw = task.encode(element, element.nbytes)  # no link known: raw
    task.resume()
    clock.now = 0.1  # the pipeline made the next 4 MB in 0.1 s
    assert task.encode(element, element.nbytes) == raw
    task.resume()
    assert task.stats()["produce_bytes_per_s"] == pytest.approx(40 * MB)
    assert sum(memoryview(part).nbytes for part in raw) > element.nbytes
    task.link("peer", 1 * MB)
    packed = task.encode(element, element.nbytes)  # a slow link: a probe
    assert sum(memoryview(part).nbytes for part in packed) < element.nbytes // 100
    for encoded in (raw, packed):
        [decoded], _ = frames.decode(encoded)
        np.testing.assert_array_equal(decoded, element)
    stats = task.stats()
    assert stats["compressed_elements"] == 1
    assert stats["compression_ratio"] < 0.01
    assert stats["link_bytes_per_s"] == 1 * MB


def test_task_compression_off_never_compresses_nor_measures() -> None:
    task = TaskCompression(level=None, clock=FakeClock())  # None, or not tcp
    task.link("peer", 1 * MB)
    element = np.zeros(1_000_000, np.float32)
    encoded = task.encode(element, element.nbytes)
    assert sum(memoryview(part).nbytes for part in encoded) > element.nbytes
    task.resume()
    task.encode(element, element.nbytes)
    stats = task.stats()
    assert stats["compressing"] is False
    assert stats["compressed_elements"] == 0
    assert stats["produce_bytes_per_s"] is None
