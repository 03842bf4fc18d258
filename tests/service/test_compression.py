"""Compression AUTO over loopback: the link is never the limit, so nothing is compressed.

(A slow link that does get zstd, and a switch mid-stream, are in
tests/hosts/test_link_compression.py: they need a rate-limited veth pair.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata import service

SIZE = 1 << 20
COUNT = 300


def zeros(i: Any) -> np.ndarray[Any, Any]:
    """1 MiB that zstd shrinks to almost nothing; ``[0]`` is the index."""
    element = np.zeros(SIZE // 4, np.float32)
    element[0] = i
    return element


@pytest.mark.exclusive  # AUTO weighs the link against the producer's measured rate
@pytest.mark.timeout(60)
def test_auto_over_loopback_sends_raw_bytes(cluster, monkeypatch) -> None:
    monkeypatch.setenv("ZMQDATA_SHARED_MEMORY", "0")  # the tcp path, not same-host
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(COUNT).map(zeros)
    ds = ds.apply(
        service.distribute(
            "distributed_epoch", c.target, compression="AUTO",
            data_transfer_protocol="tcp",
        )
    )  # fmt: skip
    seen = sorted(int(element[0]) for element in ds)
    assert seen == list(range(COUNT))

    def task() -> dict[str, Any] | None:
        tasks = c.workers[0].stats()["tasks"]
        return tasks[0] if tasks and tasks[0]["elements"] == COUNT else None

    stats = poll_for(task)
    assert stats["compressing"] is False
    # A producer faster than loopback (zeros cost nothing to make) may get
    # a probe of zstd's rate, at most once a second; everything else goes raw.
    probes = stats["compressed_elements"]
    assert probes <= 2
    assert stats["bytes"] >= (COUNT - probes) * SIZE
    link = stats["link_bytes_per_s"]
    assert link is None or link > 100e6  # measured (or not yet): loopback is fast
