"""Compression AUTO across a real slow link: zstd while it is slow, raw once it is fast.

The worker sends from one namespace to a trainer in another over a veth pair
whose rate ``tc`` limits to 100 Mbit/s: the task compresses. Then the limit
goes, mid-epoch: the task goes back to raw, and the epoch still arrives
exactly once and intact (buffers of both codecs decode).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.cli.procs import zmqdata
from tests.hosts import veth
from tests.hosts.deploy import ROOT

COUNT = 6_000


@pytest.fixture
def pair(shaping: None) -> Iterator[veth.VethPair]:
    made = veth.VethPair()
    try:
        yield made
    finally:
        made.close()


@pytest.mark.exclusive  # measures the links' rates
@pytest.mark.timeout(60)
def test_a_slow_link_gets_zstd_and_a_fast_one_does_not(pair, tmp_path) -> None:
    pair.limit("100mbit")
    flag = tmp_path / "fast"
    env = {"PYTHONPATH": str(ROOT)}
    with zmqdata(
        pair.receiver.address, str(flag), str(COUNT),
        prefix=pair.receiver.prefix(**env), module="tests.hosts.link_driver",
    ) as driver:  # fmt: skip
        target = driver.wait_for_line(r"target (\S+)").group(1)
        with zmqdata(
            "worker", "--dispatcher", target, "--host", pair.sender.address,
            "--insecure", "--heartbeat-interval-ms", "50",
            prefix=pair.sender.prefix(**env),
        ):  # fmt: skip
            driver.wait_for_line(r"compressing at \d+", timeout=20)
            pair.limit(None)
            flag.touch()
            driver.wait_for_line(r"raw at \d+", timeout=20)
            done = driver.wait_for_line(r"done (.*)", timeout=30)
    report = json.loads(done.group(1))
    assert sorted(report["seen"]) == list(range(COUNT))
    assert report["intact"]
    slow = report["compressing_stats"]
    assert slow["link_bytes_per_s"] < 20e6  # 100 Mbit/s is 12.5 MB/s
    assert slow["compression_ratio"] < 0.7
    fast = report["raw_stats"]
    assert fast["link_bytes_per_s"] > 100e6
    assert fast["compressed_elements"] >= slow["compressed_elements"] > 0
    assert report["compressing"] < report["raw"] < COUNT
