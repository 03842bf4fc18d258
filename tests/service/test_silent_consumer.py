"""Exactly once with a silent consumer: a lost worker's keys wait at most
``fence_timeout_ms`` for it, and it drops what it gets of them afterwards."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata import service
from zmqdata._runtime import clock

FENCE_TIMEOUT_MS = 2_000
WORKER_TIMEOUT_MS = 500
FREEZE_DEADLINE_S = 30.0


def freeze(iterator: Any) -> threading.Event:
    """Freezes ``iterator``'s reader thread right after a heartbeat (a SIGSTOP).

    Its sockets still take what arrives; nothing is read or sent until the
    returned event is set.
    """
    fetcher = iterator._fetcher
    frozen, thaw = threading.Event(), threading.Event()

    def frozen_tick(now: float) -> None:
        fetcher._carry_out(fetcher._core.heartbeat(now))  # every ack is out
        frozen.set()
        thaw.wait(FREEZE_DEADLINE_S)
        del fetcher.on_tick  # back to the reader's own
        fetcher.on_tick(clock.now())

    fetcher.on_tick = frozen_tick
    assert frozen.wait(5.0), "the reader thread did not freeze"
    return thaw


def orphaned_keys(target: str) -> int:
    [job] = service.get_status(target)["jobs"]
    orphaned: int = job["lost_keys"]["orphaned"]
    return orphaned


def test_a_silent_consumer_holds_a_lost_workers_keys_only_fence_timeout_ms(cluster):
    c = cluster(
        num_workers=2,
        worker_timeout_ms=WORKER_TIMEOUT_MS,
        client_timeout_ms=60_000,  # the silent consumer stays a consumer
        dispatcher_options={"fence_timeout_ms": FENCE_TIMEOUT_MS},
    )

    def consumer() -> Any:
        return iter(
            zd.Dataset.range(2_000).apply(
                service.distribute(
                    "distributed_epoch",
                    c.target,
                    job_name="j",
                    max_outstanding_requests=4,
                )
            )
        )

    with consumer() as live, consumer() as silent:
        got = [int(next(it)) for _ in range(20) for it in (live, silent)]
        thaw = freeze(silent)
        try:
            c.stop_worker(0)  # its buffered elements' keys are nobody's
            poll_for(lambda: orphaned_keys(c.target) > 0, timeout=5.0)
            lost_at = time.monotonic()
            got += [int(x) for x in live]
            stall = time.monotonic() - lost_at
        finally:
            thaw.set()
        got += [int(x) for x in silent]  # its buffer, and nothing of the lost task
    print(f"live consumer ended {stall:.2f} s after the loss was declared")
    assert stall < (FENCE_TIMEOUT_MS + WORKER_TIMEOUT_MS) / 1000 + 1.0
    assert Counter(got) == Counter(range(2_000))
