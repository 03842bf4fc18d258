"""A reader's heartbeats while nothing changes: rarer, never past its fence."""

from __future__ import annotations

import itertools

from tests.client.fakes import Reader, options, state
from zmqdata._client import core
from zmqdata._wire import messages as m


def answer_last(reader: Reader, **fields: object) -> m.ClientHeartbeat:
    """The dispatcher answers the last heartbeat (``unchanged`` unless told)."""
    beat = reader.sent.heartbeats[-1]
    reply = state([1], request_id=beat.request_id, revision=11, **fields)
    reader.core.on_dispatcher(reply, reader.now)
    return beat


def run(reader: Reader, seconds: float, step: float = 0.05) -> list[float]:
    """Ticks for ``seconds``, answering each heartbeat ``unchanged``; their times."""
    times = []
    sent = len(reader.sent.heartbeats)
    for _ in range(round(seconds / step)):
        reader.advance(step)
        if len(reader.sent.heartbeats) > sent:
            sent = len(reader.sent.heartbeats)
            times.append(round(reader.now, 2))
            answer_last(reader, unchanged=True, fence_timeout_ms=5000)
    return times


def quiet_reader() -> tuple[Reader, m.GetElements]:
    """A reader of one task, and its request in flight (never answered here)."""
    reader = Reader(
        options(max_outstanding_requests=1), [1], revision=11, fence_timeout_ms=5000
    )
    [request] = reader.sent.take()
    return reader, request


def test_quiet_heartbeats_grow_rarer_up_to_80_percent_of_the_fence() -> None:
    reader, _ = quiet_reader()
    assert reader.core.silence_s == 2.5  # half the dispatcher's fence timeout
    times = run(reader, 20.0)
    gaps = [b - a for a, b in itertools.pairwise(times)][2:]  # past 1, 2 s
    ceiling = core.QUIET_SHARE * 5.0  # 4 s; the base is 1 s
    assert all(ceiling - 0.01 <= gap <= ceiling + 0.06 for gap in gaps), times
    assert all(beat.known == 11 for beat in reader.sent.heartbeats[1:])


def test_a_change_brings_the_base_interval_back() -> None:
    reader, _ = quiet_reader()
    run(reader, 6.0)
    reader.advance(2.0)
    answer_last(reader, fence_timeout_ms=5000)  # a full state: something changed
    before = len(reader.sent.heartbeats)
    reader.advance(1.0)
    assert len(reader.sent.heartbeats) == before + 1


def test_elements_received_are_acknowledged_within_the_base_interval() -> None:
    reader, request = quiet_reader()
    times = run(reader, 4.0)  # quiet: 1 s, then 2 s between heartbeats
    assert 4.0 - times[-1] < reader.core.silence_s  # (not held: see below)
    reader.reply(request, [5], lineage=[0, 1])
    sent = len(reader.sent.heartbeats)
    reader.advance(1.0)  # the base interval after the last heartbeat at most
    assert len(reader.sent.heartbeats) == sent + 1
    assert reader.sent.heartbeats[-1].acked == [[1, 0, 1]]


def test_a_quiet_reader_past_its_silence_holds_what_comes_one_round_trip() -> None:
    reader, request = quiet_reader()
    run(reader, 13.0)  # the last heartbeat 3 s ago: past its 2.5 s silence
    sent = len(reader.sent.heartbeats)
    reader.reply(request, [5], lineage=[0, 1])
    assert reader.elements() == []  # held: it may have been fenced out meanwhile
    assert len(reader.sent.heartbeats) == sent + 1  # asks at once
    answer_last(reader, unchanged=True, fence_timeout_ms=5000)
    assert reader.elements() == [5]  # its task still read: released


def test_without_a_fence_timeout_the_reader_keeps_the_safe_default() -> None:
    reader = Reader(options(max_outstanding_requests=1), [1])
    assert reader.core.silence_s == core.SILENCE_S
    assert reader.core.pace.max_s == core.QUIET_SHARE * 2 * core.SILENCE_S
