"""Chaos loop: DYNAMIC reads while the dispatcher process stalls or dies.

Every process is real: a fault-tolerant ``zmqdata dispatcher`` and two
``zmqdata worker`` daemons. Each trial reads ``range(N)`` with
``distributed_epoch`` and, at a random element, either freezes the dispatcher
(SIGSTOP) for longer than a worker's split-request retry (0.5 s), or kills it
with SIGKILL and restarts it from its journal. No worker fails, so every
element must arrive exactly once, and every read must end in time.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials (default 6; the closing
notes of issue 11 cite longer runs).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from contextlib import ExitStack

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import free_port
from tests.service.test_dispatcher_kill import (
    num_workers,
    start_dispatcher,
    start_worker,
)
from tests.service.validated import assert_records_valid
from zmqdata import service

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "6"))
N = 6_000
READ_DEADLINE_S = 30.0


def _stall(pid: int, seconds: float) -> None:
    """Freezes process ``pid`` now and lets it go on after ``seconds``."""
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(seconds, os.kill, (pid, signal.SIGCONT)).start()


@pytest.mark.timeout(60 + 5 * TRIALS)
def test_dynamic_reads_stay_exactly_once_while_the_dispatcher_stalls_or_dies(
    tmp_path,
):
    rng = random.Random(int(os.environ.get("ZMQDATA_CHAOS_SEED", "11")))
    port, work_dir = free_port(), str(tmp_path / "journal")
    target = f"tcp://127.0.0.1:{port}"
    outcomes: Counter[str] = Counter()
    with ExitStack() as stack:
        dispatcher = start_dispatcher(stack, port, work_dir)
        for _ in range(2):
            start_worker(stack, target)
        poll_for(lambda: num_workers(target) == 2, timeout=15)
        for trial in range(TRIALS):
            fault = rng.choice(("stall", "kill"))
            at = rng.randrange(1, N // 2)
            ds = zd.Dataset.range(N).apply(
                service.distribute(
                    "distributed_epoch", target, max_outstanding_requests=8
                )
            )
            started = time.monotonic()
            with iter(ds) as iterator:
                got = ints(next(iterator) for _ in range(at))
                if fault == "stall":
                    _stall(dispatcher.popen.pid, rng.uniform(0.6, 1.5))
                else:
                    assert_records_valid(dispatcher)
                    dispatcher.stop(signal.SIGKILL)
                    dispatcher = start_dispatcher(stack, port, work_dir)
                got += ints(iterator)
            took = time.monotonic() - started
            counts = Counter(got)
            assert counts == {i: 1 for i in range(N)}, (
                f"trial {trial} ({fault} at element {at}): "
                f"{N - len(counts)} missing, "
                f"{sum(c > 1 for c in counts.values())} repeated"
            )
            assert took < READ_DEADLINE_S, (trial, fault, took)
            assert_records_valid(dispatcher)
            outcomes[fault] += 1
            poll_for(lambda: num_workers(target) == 2, timeout=15)
    assert sum(outcomes.values()) == TRIALS
