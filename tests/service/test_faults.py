"""Workers and dispatchers that come late, leave early, or fail."""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service import probes
from tests.service.cluster import free_port
from zmqdata import errors, service


def run_in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs ``fn`` on a thread; the dict gets ``result`` or ``error``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, name="test-consumer")
    thread.start()
    return thread, outcome


# ------------------------------------------------------------------ late workers


@pytest.mark.parametrize(
    ("mode", "copies"), [("parallel_epochs", 1), ("distributed_epoch", 1)]
)
def test_worker_registered_after_the_iterator_was_created_is_read_from(
    cluster, mode, copies
):
    c = cluster(num_workers=0)
    ds = zd.Dataset.range(50).apply(service.distribute(mode, c.target))
    with iter(ds) as it:
        c.add_worker()
        got = ints(it)
    assert Counter(got) == {i: copies for i in range(50)}


def test_worker_added_mid_iteration_produces_its_own_copy(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(3000).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=8)
    )
    with iter(ds) as it:
        first = ints([next(it)])
        # Worker 0 cannot be done: its buffer and our credit hold far less than 3000.
        c.add_worker()
        got = first + ints(it)
    assert Counter(got) == {i: 2 for i in range(3000)}


def stand_still(seconds: float) -> None:
    """Holds the GIL for ``seconds``: every thread of this process stands still.

    As a long garbage collection does: the dispatcher, its workers and their
    readers all stop, and none heartbeats meanwhile.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(10 * seconds)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(interval)


def test_a_process_standing_still_past_the_timeouts_loses_no_worker(cluster):
    c = cluster(num_workers=1)  # worker_timeout_ms=500, client_timeout_ms=2000
    ds = zd.Dataset.range(3000).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=8)
    )
    with iter(ds) as it:
        first = ints([next(it)])
        stand_still(2.5)
        got = first + ints(it)
    # A worker taken for lost would have registered again with a new copy.
    assert Counter(got) == {i: 1 for i in range(3000)}


# ------------------------------------------------------------------ lost workers


# In-process workers are read over inproc unless the consumer asks for tcp.
PROTOCOLS = pytest.mark.parametrize("protocol", [None, "tcp"])


def read_while_worker_0_stops(c, mode: str, protocol: str | None) -> list[int]:
    """Reads range(5000) from two workers, stopping worker 0 after 10 elements."""
    ds = zd.Dataset.range(5000).apply(
        service.distribute(
            mode, c.target, max_outstanding_requests=4, data_transfer_protocol=protocol
        )
    )
    with iter(ds) as it:
        got = ints(next(it) for _ in range(10))
        c.stop_worker(0)
        return got + ints(it)


@PROTOCOLS
def test_worker_stopping_mid_iteration_off_the_other_copy_completes(cluster, protocol):
    got = read_while_worker_0_stops(cluster(num_workers=2), "parallel_epochs", protocol)
    counts = Counter(got)
    assert set(counts) == set(range(5000))  # the surviving worker's full copy
    assert set(counts.values()) <= {1, 2}
    assert len(got) < 2 * 5000  # the stopped worker's copy was cut short


@PROTOCOLS
def test_worker_stopping_mid_iteration_dynamic_no_duplicates(cluster, protocol):
    got = read_while_worker_0_stops(
        cluster(num_workers=2), "distributed_epoch", protocol
    )
    assert len(got) == len(set(got))  # at most once
    assert set(got) <= set(range(5000))
    assert len(got) > 1000  # the surviving worker went on with the remaining splits


@PROTOCOLS
def test_iteration_waits_for_a_replacement_when_every_worker_is_gone(cluster, protocol):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(2000).apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            max_outstanding_requests=2,
            data_transfer_protocol=protocol,
        )
    )
    with iter(ds) as it:
        got = ints([next(it)])
        c.stop_worker(0)
        poll_for(lambda: c.num_registered_workers() == 0)
        c.add_worker()
        got += ints(it)
    counts = Counter(got)
    assert set(counts) == set(range(2000))  # the replacement's full copy
    assert sum(counts.values()) <= 2000 + 3


# ------------------------------------------------------------------ late or missing dispatcher


def test_consumer_started_before_the_servers_gets_all_data(cluster):
    port = free_port()
    started = threading.Event()

    def consume() -> list[Any]:
        started.set()
        ds = zd.Dataset.range(40).apply(
            service.distribute("distributed_epoch", f"127.0.0.1:{port}")
        )
        return ints(ds)

    thread, outcome = run_in_thread(consume)
    started.wait(5)
    cluster(num_workers=1, port=port)
    thread.join(20)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome
    assert sorted(outcome["result"]) == list(range(40))


@pytest.mark.parametrize(
    "call",
    [
        lambda target: zd.Dataset.range(3).apply(
            service.distribute("parallel_epochs", target)
        ),
        lambda target: service.from_dataset_id("parallel_epochs", target, "1"),
        lambda target: list(
            service.from_dataset_id(
                "parallel_epochs",
                target,
                "1",
                element_spec=zd.Dataset.range(1).element_spec,
            )
        ),
        lambda target: service.get_status(target),
    ],
    ids=["distribute", "from_dataset_id", "iterate", "get_status"],
)
def test_no_dispatcher_is_unavailable_within_the_timeout(monkeypatch, call):
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "1")
    target = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(errors.UnavailableError, match=target):
        call(target)
    assert 0.9 < time.monotonic() - start < 4.0


@PROTOCOLS
def test_reader_gives_up_when_dispatcher_and_workers_are_gone(
    cluster, monkeypatch, protocol
):
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "1")
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(100_000).apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            max_outstanding_requests=2,
            data_transfer_protocol=protocol,
        )
    )
    with iter(ds) as it:
        next(it)
        c.stop()
        start = time.monotonic()
        with pytest.raises(errors.UnavailableError):
            for _ in it:
                pass
        assert time.monotonic() - start < 5.0


# ------------------------------------------------------------------ user errors


@pytest.mark.parametrize("mode", ["parallel_epochs", "distributed_epoch"])
def test_user_function_error_reaches_the_consumer(cluster, mode):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(5).map(lambda x: 1 // 0)
    ds = ds.apply(service.distribute(mode, c.target))
    with pytest.raises(errors.ZmqDataError, match="ZeroDivisionError"):
        list(ds)


def test_error_after_some_elements_delivers_them_first(cluster):
    c = cluster(num_workers=1)

    def explode_at_five(x: Any) -> Any:
        if x == 5:
            raise RuntimeError(f"bad element {x}")
        return x

    ds = zd.Dataset.range(10).map(explode_at_five)
    ds = ds.apply(service.distribute("parallel_epochs", c.target))
    with iter(ds) as it:
        assert ints(next(it) for _ in range(5)) == [0, 1, 2, 3, 4]
        with pytest.raises(errors.ZmqDataError, match="RuntimeError: bad element 5"):
            next(it)


def test_generator_error_reaches_the_consumer(cluster):
    c = cluster(num_workers=1)

    def gen():
        yield 1
        raise ValueError("boom")

    ds = zd.Dataset.from_generator(gen).apply(
        service.distribute("parallel_epochs", c.target)
    )
    with pytest.raises(errors.ZmqDataError, match="ValueError: boom"):
        list(ds)


# ------------------------------------------------------------------ flow control


@PROTOCOLS
@pytest.mark.parametrize("limit", [1, 2, 5])
def test_max_outstanding_requests_bounds_what_the_client_holds(
    cluster, limit, protocol
):
    """What the client holds (buffered or requested) survives its worker's loss.

    The worker produces all 100 elements into its own buffer at once. After the
    consumer took one element, the worker is stopped: whatever the client had
    fetched by then still arrives, whatever was on the worker is lost. A
    replacement worker then produces a full copy, so the count of elements from
    the first copy is ``1 + held``, and ``held <= max_outstanding_requests``.
    """
    c = cluster(num_workers=1)
    key = probes.new_key()
    ds = zd.Dataset.range(100).map(functools.partial(probes.record, key))
    ds = ds.apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            max_outstanding_requests=limit,
            data_transfer_protocol=protocol,
        )
    )
    with iter(ds) as it:
        got = ints([next(it)])
        poll_for(lambda: probes.count(key) == 100)
        c.stop_worker(0)
        c.add_worker()
        got += ints(it)
    assert set(got) == set(range(100))
    from_first_copy = len(got) - 100
    assert 1 <= from_first_copy <= 1 + limit
