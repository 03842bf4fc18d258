"""target_workers: LOCAL reads only workers in this process; ANY reads them all."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from zmqdata import service


@pytest.fixture
def remote_worker(cluster) -> Iterator[tuple[object, subprocess.Popen[str]]]:
    """An in-process cluster with one extra worker in another process."""
    c = cluster(num_workers=1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmqdata", "worker", "--dispatcher", c.target,
         "--heartbeat-interval-ms", "50"],
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        poll_for(lambda: c.num_registered_workers() == 2, timeout=30)
        yield c, proc
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(("target_workers", "copies"), [("LOCAL", 1), ("ANY", 2)])
def test_local_reads_only_in_process_workers(remote_worker, target_workers, copies):
    c, _ = remote_worker
    ds = zd.Dataset.range(50).apply(
        service.distribute("parallel_epochs", c.target, target_workers=target_workers)
    )
    assert Counter(ints(ds)) == {i: copies for i in range(50)}


def test_local_distributed_epoch_hands_no_split_to_other_processes(remote_worker):
    c, _ = remote_worker
    ds = zd.Dataset.range(100).apply(
        service.distribute("distributed_epoch", c.target, target_workers="LOCAL")
    )
    assert Counter(ints(ds)) == {i: 1 for i in range(100)}


def test_local_read_without_a_worker_in_this_process_fails_at_once(cluster):
    c = cluster(num_workers=1)
    c.stop_worker(0)
    ds = zd.Dataset.range(10).apply(
        service.distribute("parallel_epochs", c.target, target_workers="LOCAL")
    )
    with pytest.raises(zd.errors.FailedPreconditionError, match="none runs here"):
        list(ds)
