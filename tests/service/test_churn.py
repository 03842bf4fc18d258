"""Worker churn with real worker processes: SIGTERM, kill -9, restarts, and a soak.

Workers run as ``python -m zmqdata worker`` children (``tests/cli/procs.py``), so a
``kill -9`` is a real crash: no goodbye, sockets torn down by the kernel. The
dispatcher runs in this process with a short ``worker_timeout_ms``. The
guarantees checked here are the table of ``docs/reliability.md``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

import zmqdata as zd
from tests.cli.procs import Proc, zmqdata
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import Cluster, free_port
from zmqdata import service
from zmqdata._dispatcher.splits import split_size
from zmqdata._worker.splits import AT_MOST_ONCE_BATCH
from zmqdata._worker.task import BUFFER_BYTES, BUFFER_ITEMS

WORKER_TIMEOUT_MS = 500
pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


class ProcCluster:
    """An in-process dispatcher and worker processes started with ``add``."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.dispatcher = service.DispatchServer(
            service.DispatcherConfig(
                port=0,
                worker_timeout_ms=WORKER_TIMEOUT_MS,
                client_timeout_ms=10_000,  # a loaded machine delays a heartbeat past 2 s
            )
        )
        stack.callback(self.dispatcher.stop)
        self.target = self.dispatcher.target

    def add(self, count: int = 1, port: int | None = None) -> list[Proc]:
        """Starts ``count`` workers and waits until the dispatcher knows them."""
        args = ["worker", "--dispatcher", self.target, "--heartbeat-interval-ms", "50"]
        if port is not None:
            args += ["--port", str(port)]
        procs = [self.stack.enter_context(zmqdata(*args)) for _ in range(count)]
        addresses = [p.wait_for_line(r"worker ready: (\S+)").group(1) for p in procs]
        hostports = [a.split("://", 1)[1] for a in addresses]
        poll_for(lambda: set(hostports) <= set(self.addresses()), timeout=10)
        return procs

    def addresses(self) -> list[str]:
        return [w["address"] for w in service.get_status(self.target)["workers"]]

    def num_workers(self) -> int:
        return len(self.addresses())


@pytest.fixture
def procs() -> Iterator[ProcCluster]:
    with ExitStack() as stack:
        yield ProcCluster(stack)


def kill(proc: Proc, sig: int) -> None:
    assert proc.stop(sig) in (0, -sig, 128 + sig, 1), proc.stderr


@pytest.mark.exclusive  # a loaded machine grows the dead worker's split batch
@pytest.mark.parametrize("exactly_once", [True, False])
def test_kill_9_mid_read_dynamic_is_exactly_once_or_loses_only_what_was_in_flight(
    procs, exactly_once
):
    n, credit = 20_000, 8
    workers = procs.add(3)
    ds = zd.Dataset.range(n).apply(
        service.distribute(
            "distributed_epoch",
            procs.target,
            max_outstanding_requests=credit,
            exactly_once=exactly_once,
        )
    )
    with iter(ds) as it:
        got = ints(next(it) for _ in range(2_000))
        kill(workers[0], signal.SIGKILL)
        got += ints(it)  # ends: the dead worker's task is dropped after the timeout
    if exactly_once:  # the dead worker's undelivered elements come from the others
        assert Counter(got) == {i: 1 for i in range(n)}
        return
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) <= set(range(n))
    # What the dead worker had taken but not delivered: its task buffer
    # (BUFFER_ITEMS elements produced, not sent), the split it was producing,
    # the one queued after it and the two it asked for ahead (an at-most-once
    # task asks for AT_MOST_ONCE_BATCH at a time), and the replies in flight
    # (at most the consumer's credit).
    bound = BUFFER_ITEMS + 2 * AT_MOST_ONCE_BATCH * split_size(n) + credit
    assert n - len(got) <= bound, (n - len(got), bound)


def test_worker_restarted_on_its_port_after_kill_9_off_produces_a_full_copy(procs):
    """OFF: the first incarnation's elements read so far, then a full fresh copy."""
    n, port = 3_000, free_port()
    (first,) = procs.add(1, port=port)
    ds = zd.Dataset.range(n).apply(
        service.distribute("parallel_epochs", procs.target, max_outstanding_requests=4)
    )
    with iter(ds) as it:
        got = ints(next(it) for _ in range(10))
        kill(first, signal.SIGKILL)
        procs.add(1, port=port)  # same port, same address: replaces the old worker
        got += ints(it)
    counts = Counter(got)
    assert set(counts) == set(range(n))  # the restarted worker's full copy
    # The rest is a prefix of the dead worker's copy (it produced in order).
    twice = sorted(i for i, c in counts.items() if c == 2)
    assert set(counts.values()) <= {1, 2}
    assert twice == list(range(len(twice)))
    assert len(twice) >= 10


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_four_of_five_workers_stopped_reads_go_on(procs, sig):
    workers = procs.add(5)
    ds = (
        zd.Dataset.range(10)
        .repeat()
        .apply(
            service.distribute(
                "parallel_epochs", procs.target, max_outstanding_requests=1
            )
        )
    )
    with iter(ds) as it:
        got = ints(next(it) for _ in range(100))
        for proc in workers[:4]:
            kill(proc, sig)
        got = ints(next(it) for _ in range(1_000))
    assert set(got) <= set(range(10))
    poll_for(lambda: procs.num_workers() == 1)


# range(1).repeat() under DYNAMIC: each repetition has one split, which one worker
# gets; the others see empty passes and keep asking for the next repetition's split
# (an endless repeat ends on an empty pass only without a shared split provider,
# as in tf.data), so losing the worker that produced so far loses nothing.
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize("keep", [0, 4])
def test_range_1_repeat_dynamic_four_of_five_stopped_still_zeros(procs, sig, keep):
    workers = procs.add(5)
    ds = (
        zd.Dataset.range(1)
        .repeat()
        .apply(
            # A small credit: the 500 reads after the losses cannot all be buffered.
            service.distribute(
                "distributed_epoch", procs.target, max_outstanding_requests=8
            )
        )
    )
    with iter(ds) as it:
        assert ints(next(it) for _ in range(200)) == [0] * 200
        for index, proc in enumerate(workers):
            if index != keep:
                kill(proc, sig)
        assert ints(next(it) for _ in range(500)) == [0] * 500
    poll_for(lambda: procs.num_workers() == 1)


# ------------------------------------------------------------------ soak

SOAK_S = float(os.environ.get("ZMQDATA_SOAK_S", "10"))
"""``make soak`` runs it for minutes (ZMQDATA_SOAK_S=180)."""


def consumer_loop(
    target: str,
    stop: threading.Event,
    index: int,
    errors: list[BaseException],
    rounds: int | None = None,
    done: list[int] | None = None,
) -> Callable[[], None]:
    """Reads whole passes (OFF and DYNAMIC in turn), every third one left early."""

    def run() -> None:
        round_ = 0
        try:
            while not stop.is_set() and (rounds is None or round_ < rounds):
                round_ += 1
                if done is not None:
                    done[0] += 1
                mode = ("parallel_epochs", "distributed_epoch")[(index + round_) % 2]
                ds = zd.Dataset.range(300).apply(service.distribute(mode, target))
                with iter(ds) as it:
                    if round_ % 3 == 0:  # leaves early, mid-iteration
                        ints(next(it) for _ in range(50))
                        continue
                    got = sorted(ints(it))
                copies = 2 if mode == "parallel_epochs" else 1
                assert got == sorted(list(range(300)) * copies), (mode, len(got))
        except BaseException as error:
            errors.append(error)

    return run


@pytest.mark.timeout(SOAK_S + 60)
def test_soak_consumers_come_and_go_state_stays_bounded(cluster):
    """``SOAK_S`` of consumers starting, finishing and leaving early, on 2 workers.

    Afterwards: no consumer, job or iteration left in the dispatcher's tables
    (every job was unnamed), no task left on the workers, worker buffers never past their bound, and the Python heap of this
    process (dispatcher, workers and consumers all live here) grew by less than
    a few MiB, however many jobs ran.
    """
    c: Cluster = cluster(
        num_workers=2,
        dispatcher_options={
            "job_gc_timeout_ms": 200,
            "job_gc_check_interval_ms": 50,
            "gc_dynamic_sharding_jobs": True,
        },
    )

    def records() -> dict[str, int]:
        return c.status()["records"]

    warm: list[BaseException] = []
    consumer_loop(c.target, threading.Event(), 0, warm, rounds=3)()
    assert not warm, warm
    poll_for(lambda: records()["clients"] == 0)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        stop, errors = threading.Event(), []
        done = [0]
        threads = [
            threading.Thread(
                target=consumer_loop(c.target, stop, i, errors, done=done),
                name=f"test-soak-{i}",
            )
            for i in range(4)
        ]
        for thread in threads:
            thread.start()
        peak = {"elements": 0, "bytes": 0}
        end = time.monotonic() + SOAK_S

        def sample_until_end() -> bool:
            for worker in c.workers:
                stats = worker.stats()
                peak["elements"] = max(peak["elements"], stats["buffered_elements"])
                peak["bytes"] = max(peak["bytes"], stats["buffered_bytes"])
            return time.monotonic() >= end or bool(errors)

        poll_for(sample_until_end, timeout=SOAK_S + 5, interval=0.05)
        stop.set()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        assert done[0] >= 20, done  # it really churned
        poll_for(lambda: records()["clients"] == 0)
        poll_for(lambda: records()["jobs"] == records()["iterations"] == 0, timeout=10)
        poll_for(
            lambda: all(len(w.stats()["tasks"]) == 0 for w in c.workers), timeout=10
        )
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    tasks_per_worker = 4  # one live iteration per consumer thread at most
    assert peak["elements"] <= len(c.workers) * tasks_per_worker * BUFFER_ITEMS
    assert peak["bytes"] <= len(c.workers) * tasks_per_worker * BUFFER_BYTES
    assert growth < 8 * 2**20, (growth, done[0])
