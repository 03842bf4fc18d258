"""The read core's contract: events in, instructions out, on a fake clock.

``ReadCore.handle(event, now)`` and ``tick(now)`` return instructions
(``_client/instructions.py``); nothing here has a socket, a thread or a clock.
"""

from __future__ import annotations

from typing import Any

from tests.client.fakes import TIMEOUTS, LinkTable, options, state
from zmqdata._client import core
from zmqdata._client import instructions as i
from zmqdata._client.core import Counters, ReadCore
from zmqdata._client.credit import CreditPlan
from zmqdata._wire import frames
from zmqdata._wire import messages as m


def reader(
    credit: int = 4, tasks: tuple[int, ...] = (1, 2)
) -> tuple[ReadCore, Counters]:
    """A first-come core of ``tasks`` under ``credit``, started at time 0."""
    read = options(max_outstanding_requests=credit)
    counters = Counters()
    read_core = ReadCore(
        read, TIMEOUTS, 7, counters, CreditPlan(read, counters), LinkTable(), 0.0
    )
    assert read_core.handle(i.Started(state(list(tasks))), 0.0) == []
    return read_core, counters


def requests(out: list[i.Instruction]) -> list[tuple[str, int, int]]:
    """``(endpoint, task, elements asked)`` of each ``ToWorker`` in ``out``."""
    return [
        (x.endpoint, x.request.task_id, x.request.max_elements)
        for x in out
        if isinstance(x, i.ToWorker)
    ]


def only(kind: type[Any], out: list[i.Instruction]) -> list[Any]:
    return [x for x in out if isinstance(x, kind)]


def data(
    request: m.GetElements, elements: list[Any], lineage: list[int] | None = None
) -> i.FromWorker:
    """The worker's answer to ``request``: ``elements``, one key each of ``lineage``."""
    group = frames.encode(elements)
    header = m.Elements(
        request_id=request.request_id,
        task_id=request.task_id,
        count=len(elements),
        parts=[len(group)],
        lineage=lineage or [],
        widths=[len(elements), 1] if lineage else [],
    )
    return i.received(header, [b"", *group])


def test_credit_is_granted_and_returned() -> None:
    read_core, counters = reader(credit=4)
    first, second = only(i.ToWorker, read_core.handle(i.Drained(), 0.0))
    assert requests([first, second]) == [("tcp://w:1", 1, 2), ("tcp://w:2", 2, 1)]
    assert read_core.handle(i.Drained(), 0.0) == []  # every element of credit is out
    [deliver] = read_core.handle(data(first.request, [10, 11]), 0.0)
    assert isinstance(deliver, i.Deliver)
    assert deliver.batch.elements == [10, 11]
    # Two buffered, one in flight: one element of credit is free again.
    assert requests(read_core.handle(i.Drained(), 0.0)) == [("tcp://w:1", 1, 1)]
    read_core.handle(data(second.request, [20]), 0.0)
    assert read_core.handle(i.Drained(), 0.0) == []  # 3 buffered, 1 in flight
    assert counters.starved  # task 2 waits on the trainer
    counters.taken = 3  # the trainer took them: their credit comes back
    assert requests(read_core.handle(i.Drained(), 0.0)) == [("tcp://w:2", 2, 3)]


def test_an_unsent_request_gives_its_credit_back_and_is_retried_later() -> None:
    read_core, _ = reader(credit=4)
    first, _ = only(i.ToWorker, read_core.handle(i.Drained(), 0.0))
    assert read_core.handle(i.Unsent(first.request), 0.0) == []
    assert requests(read_core.handle(i.Drained(), 0.0)) == []  # waiting out 4 ms
    out = read_core.tick(0.004)
    # Three elements free (one in flight to task 2): all of them for task 1.
    assert requests(out) == [("tcp://w:1", 1, 3)]


def test_a_request_absent_is_retried_after_its_deadline_backing_off() -> None:
    read_core, _ = reader(credit=1, tasks=(1,))
    [ask] = only(i.ToWorker, read_core.handle(i.Drained(), 0.0))
    retries = []
    now = 0.0
    for _ in range(3):
        error = m.Error(request_id=ask.request.request_id, code=m.ABSENT, message="")
        assert read_core.handle(i.FromWorker(error), now) == []
        asked_at = now
        while not requests(out := read_core.handle(i.Drained(), now)):
            now = round(now + 0.001, 3)
        [ask] = only(i.ToWorker, out)
        retries.append(round(now - asked_at, 3))
    assert retries == [0.004, 0.008, 0.016]  # not before its deadline, doubling


def test_acknowledgements_are_batched_into_the_heartbeat_until_confirmed() -> None:
    read_core, _ = reader(credit=4)
    out = read_core.tick(0.0)  # the first heartbeat goes at once, then requests
    [beat] = only(i.ToDispatcher, out)
    first, second = only(i.ToWorker, out)
    read_core.handle(data(first.request, [1, 2], lineage=[0, 2]), 0.1)
    read_core.handle(data(second.request, [3], lineage=[50, 51]), 0.2)
    assert only(i.ToDispatcher, read_core.tick(0.5)) == []  # not before it is due
    [due] = only(i.ToDispatcher, read_core.tick(1.0))
    assert due.message.acked == [[1, 0, 2], [2, 50, 51]]  # both replies, one heartbeat
    [again] = only(i.ToDispatcher, read_core.tick(2.0))
    assert again.message.acked == due.message.acked  # not confirmed: reported again
    answer = state([1, 2], request_id=due.message.request_id, unchanged=True)
    assert read_core.handle(i.FromDispatcher(answer), 2.1) == []
    [after] = only(i.ToDispatcher, read_core.tick(3.1))
    assert after.message.acked == []
    assert beat.message.acked == []


def test_a_fence_holds_replies_until_the_dispatcher_answers() -> None:
    """Task lost during a silence: the still-listed task's replies are delivered,
    the lost task's dropped (never acknowledged)."""
    read_core, counters = reader(credit=4)
    out = read_core.tick(0.0)
    [before] = only(i.ToDispatcher, out)
    first, second = only(i.ToWorker, out)
    late = core.SILENCE_S + 1.0  # frozen: no heartbeat meanwhile
    out = read_core.handle(data(first.request, [10, 11], lineage=[0, 2]), late)
    [hold] = only(i.ToDispatcher, out)  # a heartbeat at once; the reply is held
    assert only(i.Deliver, out) == []
    assert hold.message.acked == []
    out = read_core.handle(data(second.request, [20], [7, 8]), late)
    assert out == []  # held too (the heartbeat already went)
    # The answer to the heartbeat before the silence releases nothing.
    earlier = state([1, 2], request_id=before.message.request_id)
    assert only(i.Deliver, read_core.handle(i.FromDispatcher(earlier), late)) == []
    # The answer to the fence: task 1 was lost meanwhile.
    lost = state([2], request_id=hold.message.request_id, task_epoch=1)
    out = read_core.handle(i.FromDispatcher(lost), late)
    assert [d.batch.elements for d in only(i.Deliver, out)] == [[20]]
    assert only(i.Dropped, out) == [i.Dropped(2)]
    assert counters.received == 1
    [beat] = only(i.ToDispatcher, read_core.tick(late + 1.0))
    assert beat.message.acked == [[2, 7, 8]]  # the lost task's keys never are
    assert beat.message.task_epoch == 1


def test_the_end_and_a_failure_are_instructions_once() -> None:
    read_core, _ = reader(credit=2, tasks=())
    out = read_core.handle(i.FromDispatcher(state([], finished=True)), 0.0)
    assert only(i.End, out) == [i.End()]
    assert read_core.handle(i.Broken(ValueError("late")), 0.0) == []
    assert read_core.tick(100.0) == []


def test_closing_releases_the_reader_with_what_is_not_confirmed() -> None:
    read_core, _ = reader(credit=2, tasks=(1,))
    [ask] = only(i.ToWorker, read_core.handle(i.Drained(), 0.0))
    read_core.handle(data(ask.request, [1], lineage=[4, 5]), 0.0)
    [release] = read_core.handle(i.Closing(), 0.0)
    assert isinstance(release, i.ToDispatcher)
    assert isinstance(release.message, m.ReleaseIterationClient)
    assert release.message.acked == [[1, 4, 5]]
