"""Exactly once on the reader's side: acknowledgements and fences (fake clock)."""

from __future__ import annotations

from tests.client.fakes import Reader, options, state
from zmqdata._client import acks
from zmqdata._wire import messages as m


def heartbeat(reader: Reader) -> m.ClientHeartbeat:
    reader.advance(1.0)
    return reader.sent.heartbeats[-1]


def answer(
    reader: Reader, beat: m.ClientHeartbeat, tasks: list[int], epoch: int
) -> None:
    """The dispatcher answers heartbeat ``beat``."""
    reply = state(tasks, task_epoch=epoch, request_id=beat.request_id)
    reader.core.on_dispatcher(reply, reader.now)


def test_received_keys_are_reported_per_task_until_a_heartbeat_is_answered() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    reader.reply(first, [10, 11], lineage=[10, 12])
    reader.reply(second, [20], lineage=[20, 21])
    beat = heartbeat(reader)
    assert beat.acked == [[1, 10, 12], [2, 20, 21]]
    assert heartbeat(reader).acked == beat.acked  # not answered: reported again
    answer(reader, beat, [1, 2], epoch=0)
    assert heartbeat(reader).acked == []


def test_an_end_of_sequence_acknowledges_the_keys_the_task_dropped() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1])
    [request] = reader.sent.take()
    reader.reply(request, [], end=True, lineage=[5, 9])
    assert heartbeat(reader).acked == [[1, 5, 9]]
    assert reader.sent.trainer[-1] == ([], 0, [5, 9], [], [])


def test_a_dropped_task_is_fenced_by_the_next_heartbeat_with_its_acks() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    reader.reply(first, [1], lineage=[1, 2])
    reader.core.apply_state(state([2], task_epoch=1))  # task 1's worker is lost
    reader.reply(second, [2], lineage=[2, 3])
    late = m.GetElements(
        request_id=first.request_id, task_id=1, client_id=7, max_elements=1
    )
    reader.reply(late, [3], lineage=[3, 4])  # the lost worker answers anyway
    beat = heartbeat(reader)
    assert beat.task_epoch == 1
    assert beat.acked == [[1, 1, 2], [2, 2, 3]]
    assert reader.elements() == [1, 2]


def test_the_epoch_is_echoed_only_once_every_ack_fits_in_a_heartbeat(
    monkeypatch,
) -> None:
    monkeypatch.setattr(acks, "REPORT_NUMBERS", 5)
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, _ = reader.sent.take()
    reader.reply(first, [1, 2, 3], lineage=[0, 1])  # one range
    reader.core.acks.received(1, [4, 5, 8, 9, 12, 13])  # three more ranges
    reader.core.apply_state(state([2], task_epoch=1))
    beat = heartbeat(reader)
    assert beat.task_epoch == 0  # acks left over: not fenced yet
    answer(reader, beat, [2], epoch=1)
    beat = heartbeat(reader)
    assert beat.task_epoch == 1


def test_marks_are_reported_the_latest_per_root_until_answered() -> None:
    reader = Reader(options(max_outstanding_requests=4), [1, 2])
    first, second = reader.sent.take()
    root = [2, 10, 11]
    reader.reply(first, [0, 1], progress=[[*root, 1], [2, 30, 31, 0]])
    reader.reply(second, [2], progress=[[*root, 3], [*root, 2], [5]])  # [5]: no mark
    beat = heartbeat(reader)
    assert beat.progress == [[*root, 3], [2, 30, 31, 0]]
    assert heartbeat(reader).progress == beat.progress  # not answered: again
    answer(reader, beat, [1, 2], 0)
    assert heartbeat(reader).progress == []
