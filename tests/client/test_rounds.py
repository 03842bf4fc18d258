"""``ReadCore`` with ``RoundPlan``: coordinated reads, driven on a fake clock."""

from __future__ import annotations

from typing import Any

from tests.client.fakes import Reader, options, state
from zmqdata._client import rounds
from zmqdata._wire import messages as m


def _reader(window: int, **extra: Any) -> Reader:
    read = options(max_outstanding_requests=window, consumer_index=1, num_consumers=2)
    return Reader(read, [1, 2], **extra)


def test_rounds_below_the_horizon_go_to_their_tasks_in_chunks() -> None:
    reader = _reader(8, rounds=[[0, [1, 2]]], horizon=6)
    sent = reader.sent.take()
    assert [(r.task_id, r.rounds) for r in sent] == [
        (1, [0, 2]),
        (1, [4]),
        (2, [1, 3]),
        (2, [5]),
    ]
    assert {r.consumer_index for r in sent} == {1}
    # Far from the horizon's end: a heartbeat asks for more, with the round.
    assert reader.sent.heartbeats[-1].current_round == 6


def test_rounds_are_handed_out_in_order() -> None:
    reader = _reader(8, rounds=[[0, [1, 2]]], horizon=4)
    first, second = reader.sent.take()  # task 1: rounds 0, 2; task 2: 1, 3
    reader.reply(second, ["r1", "r3"])
    assert reader.elements() == []
    reader.reply(first, ["r0", "r2"])
    assert reader.elements() == ["r0", "r1", "r2", "r3"]


def test_the_window_holds_the_rounds_the_trainer_has_not_taken() -> None:
    reader = _reader(8, rounds=[[0, [1]]], horizon=100)
    sent = reader.sent.take()  # 8 rounds ahead, in chunks of a quarter
    assert [r.rounds for r in sent] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    for request in sent:
        reader.reply(request, request.rounds)
    reader.core.request_more(reader.now)
    assert reader.sent.take() == []
    assert reader.counters.starved
    reader.consume(2)
    reader.core.request_more(reader.now)
    assert [r.rounds for r in reader.sent.take()] == [[8, 9]]


def test_rounds_of_a_task_gone_are_skipped() -> None:
    reader = _reader(8, rounds=[[0, [1, 2]]], horizon=4)
    first, _ = reader.sent.take()
    reader.core.apply_state(state([1], rounds=[[0, [1, 2]]], horizon=4))
    reader.reply(first, ["r0", "r2"])
    assert reader.elements() == ["r0", "r2"]


def test_absent_rounds_are_asked_again() -> None:
    reader = _reader(8, rounds=[[0, [1]]], horizon=2)
    [request] = reader.sent.take()
    reader.error(request, m.ABSENT)
    reader.core.request_more(reader.now)
    assert reader.sent.take() == []
    reader.advance(rounds.NOT_FOUND_RETRY_S)
    assert [r.rounds for r in reader.sent.take()] == [[0, 1]]
