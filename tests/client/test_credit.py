"""``ReadCore`` with ``CreditPlan``: first-come reads, driven on a fake clock."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.fakes import Reader, options, state
from zmqdata._client import core, credit
from zmqdata._client.core import END, Failure
from zmqdata._wire import messages as m
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    UnavailableError,
)


def test_credit_is_shared_over_the_tasks_and_freed_by_the_trainer() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    assert (first.task_id, first.max_elements) == (1, 2)
    assert (second.task_id, second.max_elements) == (2, 1)
    reader.reply(first, [10, 11])
    reader.core.request_more(reader.now)
    [again] = reader.sent.take()  # 2 buffered, 1 in flight: 1 free
    assert (again.task_id, again.max_elements) == (1, 1)
    reader.reply(again, [12])
    reader.core.request_more(reader.now)
    assert reader.sent.take() == []  # 3 buffered, 1 in flight: none free
    assert reader.counters.starved
    reader.consume(3)
    reader.core.request_more(reader.now)
    [more] = reader.sent.take()
    assert (more.task_id, more.max_elements) == (1, 3)
    assert reader.elements() == [10, 11, 12]


def test_the_byte_cap_asks_one_element_until_the_size_is_known() -> None:
    reader = Reader(options(), [1])
    [probe] = reader.sent.take()
    assert probe.max_elements == 1
    big = np.zeros(credit.DEFAULT_MAX_BUFFERED_BYTES // 4 - 1024, dtype=np.uint8)
    reader.reply(probe, [big])
    for _ in range(3):
        reader.core.request_more(reader.now)
    # A quarter of the cap is buffered: three more fit, in requests of about
    # REQUEST_BYTES (one element here), PIPELINED_REQUESTS in flight.
    pipelined = reader.sent.take()
    assert [r.max_elements for r in pipelined] == [1, 1]
    for request in pipelined:
        reader.reply(request, [big])
    for _ in range(2):
        reader.core.request_more(reader.now)
    [last] = reader.sent.take()  # 3 buffered: the cap holds one more
    assert last.max_elements == 1
    assert reader.counters.starved


def test_until_the_size_is_known_every_task_is_asked_one_element() -> None:
    """A task whose worker cannot answer (registered, then silent) does not stall
    the read until the dispatcher drops it: the others' elements come."""
    reader = Reader(options(), [1, 2, 3])
    probes = reader.sent.take()
    assert sorted((r.task_id, r.max_elements) for r in probes) == [
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    _silent, *answering = probes
    for request in answering:
        reader.reply(request, [request.task_id])
    assert sorted(reader.elements()) == sorted(r.task_id for r in answering)


def test_large_elements_are_pipelined_in_requests_of_request_bytes() -> None:
    reader = Reader(options(max_outstanding_requests=100), [1])
    [first] = reader.sent.take()
    element = np.zeros(credit.REQUEST_BYTES // 4 - 1024, dtype=np.uint8)
    reader.reply(first, [element])
    reader.consume(1)
    for _ in range(3):  # one request per task per turn, up to the depth
        reader.core.request_more(reader.now)
    sent = reader.sent.take()
    assert [r.max_elements for r in sent] == [4] * credit.PIPELINED_REQUESTS


def test_scarce_credit_rotates_over_the_tasks() -> None:
    reader = Reader(options(max_outstanding_requests=1), [1, 2, 3])
    served = []
    for _ in range(6):
        [request] = reader.sent.take()
        served.append(request.task_id)
        reader.reply(request, [request.task_id])
        reader.consume(1)
        reader.core.request_more(reader.now)
    assert served == [1, 2, 3, 1, 2, 3]


def test_a_task_absent_is_asked_again_with_backoff() -> None:
    reader = Reader(options(max_outstanding_requests=8), [1])
    delays = []
    for _ in range(7):
        [request] = reader.sent.take()
        reader.error(request, m.ABSENT)
        asked_at = reader.now
        while not reader.sent.to_workers:
            reader.advance(0.001)
        delays.append(round(reader.now - asked_at, 3))
    assert delays == [0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1]
    [request] = reader.sent.take()
    reader.reply(request, [1])  # a reply starts the backoff again
    reader.consume(1)
    reader.core.request_more(reader.now)
    reader.error(reader.sent.take()[0], m.ABSENT)
    reader.advance(0.004)
    assert len(reader.sent.take()) == 1


@pytest.mark.parametrize("code", ["INVALID_ARGUMENT", "NOT_FOUND"])
def test_a_worker_error_fails_the_read(code: str) -> None:
    reader = Reader(options(max_outstanding_requests=8), [1])
    reader.error(reader.sent.take()[0], code)
    [failure] = reader.sent.trainer
    assert isinstance(failure, Failure)
    assert reader.core.done


def test_a_worker_unreachable_past_its_timeout_fails_the_read() -> None:
    reader = Reader(options(max_outstanding_requests=8), [1])
    reader.links.down_since["tcp://w:1"] = 0.0
    reader.advance(5.0)
    assert reader.sent.trainer == []
    reader.advance(0.5)
    [failure] = reader.sent.trainer
    assert isinstance(failure, Failure)
    assert isinstance(failure.error, UnavailableError)
    assert "tcp://w:1" in str(failure.error)


def test_a_lost_link_frees_its_credit_and_waits_for_the_reconnection() -> None:
    reader = Reader(options(max_outstanding_requests=2), [1, 2])
    reader.sent.take()
    reader.links.lost_links.add("tcp://w:1")
    reader.core.on_links_lost(["tcp://w:1"], reader.now)
    reader.core.request_more(reader.now)
    assert reader.sent.take() == []  # task 2 holds its credit; task 1 waits
    reader.links.lost_links.clear()
    reader.core.request_more(reader.now)
    assert [r.task_id for r in reader.sent.take()] == [1]


def test_a_silent_dispatcher_fails_the_read_once_no_worker_answers() -> None:
    reader = Reader(options(max_outstanding_requests=2), [1])
    for _ in range(11):
        reader.advance(1.0)
    [failure] = reader.sent.trainer
    assert isinstance(failure, Failure)
    assert "silent" in str(failure.error)


def test_heartbeats_are_sent_every_heartbeat_s() -> None:
    reader = Reader(options(max_outstanding_requests=2), [1])
    for _ in range(5):
        reader.advance(0.5)
    assert len(reader.sent.heartbeats) == 3  # at 0.5 s, 1.5 s, 2.5 s


def test_end_of_input_once_every_task_ended_and_owes_nothing() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    reader.core.apply_state(state([1, 2], finished=True))
    reader.reply(first, [1], end=True)
    assert reader.sent.heartbeats[-1].finished_tasks == [1]
    assert END not in reader.sent.trainer
    reader.reply(second, [], end=True)
    assert reader.sent.trainer[-1] is END
    assert reader.elements() == [1]


def test_a_task_dropped_by_the_dispatcher_frees_its_credit() -> None:
    reader = Reader(options(max_outstanding_requests=2), [1, 2])
    first, _ = reader.sent.take()
    reader.core.apply_state(state([2]))
    assert reader.core.endpoints() == {"tcp://w:2"}
    reader.reply(first, [1])  # a late answer of the task dropped: ignored
    assert reader.elements() == []
    reader.core.request_more(reader.now)
    assert [r.task_id for r in reader.sent.take()] == []  # task 2 is busy


def test_a_restarted_dispatcher_without_fault_tolerance_fails_the_read() -> None:
    reader = Reader(options(), [1], incarnation="a")
    reader.core.apply_state(state([1], incarnation="b"))
    [failure] = reader.sent.trainer
    assert isinstance(failure.error, FailedPreconditionError)


def test_a_malformed_task_info_fails_the_read() -> None:
    reader = Reader(options(), [1])
    bad = state([1])
    bad.tasks[0]["data_address"] = None
    reader.core.apply_state(bad)
    [failure] = reader.sent.trainer
    assert isinstance(failure.error, InvalidArgumentError)
    assert "data_address" in str(failure.error)


def test_an_unsendable_request_is_retried_later() -> None:
    reader = Reader(options(max_outstanding_requests=2), [])
    reader.sent.refuse.add("tcp://w:1")
    reader.core.apply_state(state([1]))
    reader.core.request_more(reader.now)
    reader.sent.refuse.clear()
    reader.core.request_more(reader.now)
    assert reader.sent.take() == []
    reader.advance(0.004)
    assert len(reader.sent.take()) == 1


@pytest.mark.parametrize(
    ("job_name", "trainer_id", "credit_"),
    [(None, None, 8192), ("shared", None, 128), ("shared", "t", 8192)],
)
def test_default_credit(
    job_name: str | None, trainer_id: str | None, credit_: int
) -> None:
    read = options(job_name=job_name, trainer_id=trainer_id)
    assert credit.default_credit(read) == credit_


def test_after_a_silence_replies_wait_for_the_dispatcher_lost_tasks_dropped() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    reader.advance(0.5)
    [before] = reader.sent.heartbeats
    reader.now += core.SILENCE_S + 0.5  # frozen: no heartbeat sent meanwhile
    reader.reply(first, [10, 11], lineage=[0, 2])
    reader.reply(second, [20], lineage=[100, 101])
    assert reader.elements() == []  # held, not acknowledged
    hold = reader.sent.heartbeats[-1]  # sent at once, on the first reply
    assert (hold.request_id > before.request_id, hold.acked) == (True, [])
    both = state([1, 2], request_id=before.request_id)
    reader.core.on_dispatcher(both, reader.now)  # answered before the silence
    assert reader.elements() == []
    lost = state([2], request_id=hold.request_id, task_epoch=1)
    reader.core.on_dispatcher(lost, reader.now)  # task 1 was lost meanwhile
    assert reader.elements() == [20]
    assert reader.counters.received == 1  # task 1's replies were dropped
    reader.advance(1.0)
    assert reader.sent.heartbeats[-1].acked == [[2, 100, 101]]
