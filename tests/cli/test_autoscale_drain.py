"""A ``zmqdata worker`` stopped with SIGTERM drains: it leaves without losing data.

Real worker processes; the dispatcher's ``worker_timeout_ms`` is a minute, so a
read that finishes in seconds shows the dispatcher took the worker's leave at
once (it did not wait to notice it was gone).
"""

from __future__ import annotations

import collections
import signal
import time
from typing import Any

import pytest

import zmqdata as zd
from tests.cli.procs import zmqdata
from tests.helpers import poll_for
from zmqdata import service

pytestmark = pytest.mark.timeout(90)

N = 3000
BURN_S = 0.001
READ_BOUND_S = 30.0
"""Far below worker_timeout_ms: the read never waits for a timeout."""


def _burn(x: Any) -> Any:
    deadline = time.perf_counter() + BURN_S
    while time.perf_counter() < deadline:
        pass
    return x


def _read_draining_one(mode: str) -> tuple[list[int], str, int]:
    """Reads ``range(N)`` from two workers, SIGTERMing one after 400 elements.

    Returns the elements, the drained worker's stderr and its exit code.
    """
    config = service.DispatcherConfig(worker_timeout_ms=60_000)
    with service.DispatchServer(config) as dispatcher:
        target = dispatcher.target
        with (
            zmqdata("worker", "--dispatcher", target) as first,
            zmqdata("worker", "--dispatcher", target) as second,
        ):
            first.wait_for_line(r"worker ready")
            second.wait_for_line(r"worker ready")
            poll_for(lambda: len(service.get_status(target)["workers"]) == 2, 20)
            reader = (
                zd.Dataset.range(N)
                .map(_burn)
                .apply(service.distribute(mode, target, max_outstanding_requests=64))
            )
            started = time.monotonic()
            seen: list[int] = []
            for element in reader:
                seen.append(int(element))
                if len(seen) == 400:
                    first.popen.send_signal(signal.SIGTERM)
            assert time.monotonic() - started < READ_BOUND_S
            code = first.popen.wait(15)
            first.wait_for_line(r"stopped")
            workers = service.get_status(target)["workers"]
            assert len(workers) == 1  # dropped on leaving, not after a timeout
            return seen, first.stderr, code


def test_distributed_epoch_gets_every_element_once_when_a_worker_drains():
    seen, stderr, code = _read_draining_one("distributed_epoch")
    assert code == 0
    assert "draining" in stderr
    assert "left the dispatcher" in stderr
    assert len(seen) == N
    assert sorted(seen) == list(range(N))


def test_parallel_epochs_keeps_the_other_copy_whole_when_a_worker_drains():
    # Each worker makes a whole copy; the drained one leaves at once, its copy
    # ended early. The other copy is complete.
    seen, stderr, code = _read_draining_one("parallel_epochs")
    assert code == 0
    assert "left the dispatcher" in stderr
    counts = collections.Counter(seen)
    assert set(counts) == set(range(N))
    assert set(counts.values()) <= {1, 2}
    assert N < len(seen) < 2 * N
