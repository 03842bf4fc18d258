"""Multi-rank reads on a worker: ``DealtBuffer`` and ``dealt.answer`` (no sockets)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from zmqdata._dataset.block import Block
from zmqdata._wire import messages as m
from zmqdata._worker import dealt
from zmqdata._worker.buffer import Cancelled, Encoded, Raw, count
from zmqdata._worker.dealt import DealtBuffer, DealtSend, answer
from zmqdata._worker.serving import Refuse

pytestmark = pytest.mark.timeout(30)

BLOCKED_S = 0.15
"""How long a put that should block is watched not to return."""


def request(split: int, *indices: int, task_id: int = 1) -> m.GetElements:
    return m.GetElements(
        task_id=task_id,
        client_id=1,
        max_elements=max(1, len(indices)),
        split=split,
        indices=list(indices),
    )


def filled(ordinal: int = 0, count: int = 4, skip: int = 0, end: bool = True) -> Any:
    """A buffer holding split ``ordinal``'s elements ``f"{ordinal}.{i}"``."""
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(ordinal, skip)
    for i in range(skip, count):
        buffer.put(ordinal, i, Raw(f"{ordinal}.{i}"), 8)
    if end:
        buffer.end(ordinal, count)
    return buffer


def taken(buffer: DealtBuffer, ordinal: int, indices: list[int]) -> list[int]:
    """The indices ``buffer.take`` took: the first ones, as many as its items hold."""
    items, _ = buffer.take(ordinal, indices)
    return indices[: count(items)]


def elements(send: Any) -> list[Any]:
    assert isinstance(send, DealtSend), send
    return [item.element for item in send.items]


class Putter:
    """``buffer.put`` on a thread: ``done`` once it returned, ``error`` if it raised."""

    def __init__(self, put: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(put,), daemon=True)
        self._thread.start()

    def _run(self, put: Callable[[], None]) -> None:
        try:
            put()
        except BaseException as error:
            self.error = error

    def blocked(self) -> bool:
        self._thread.join(BLOCKED_S)
        return self._thread.is_alive()

    def done(self, timeout: float = 5.0) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # a put left blocked ends with Cancelled


# ------------------------------------------------------------------ the buffer


def test_elements_are_taken_by_split_and_index_in_any_order():
    buffer = filled(count=4)
    assert buffer.buffered() == (4, 32)
    items, split = buffer.take(0, [2, 3])
    assert [i.element for i in items] == ["0.2", "0.3"]
    assert split is not None
    assert (split.produced, split.ended) == (4, True)
    items, _ = buffer.take(0, [0])
    assert [i.element for i in items] == ["0.0"]
    assert buffer.buffered() == (1, 8)
    assert buffer.take(0, [0])[0] == []  # taken once
    assert buffer.take(5, [0]) == ([], None)  # not this buffer's split


def test_take_returns_the_longest_run_that_is_made():
    buffer = filled(count=3, end=False)
    assert taken(buffer, 0, [1, 2, 3, 4]) == [1, 2]
    assert taken(buffer, 0, [0, 2, 3]) == [0]  # 2 is gone: the run stops


def test_skipped_elements_are_counted_not_kept():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    buffer.open(3, skip=2)
    for i in range(4):
        buffer.put(3, i, Raw(i), 8)
    assert buffer.buffered() == (2, 16)
    items, split = buffer.take(3, [0, 1, 2])
    assert items == []
    assert split is not None
    assert split.produced == 4
    assert taken(buffer, 3, [2, 3]) == [2, 3]


def test_ended_splits_are_counted_latest_first_kept():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.end(0, 0)
    buffer.end(7, 3)  # a split released meanwhile is still counted
    assert buffer.counts() == [0, 0, 7, 3]
    for q in range(dealt.COUNTS_TOLD + 5):
        buffer.end(10 + q, q)
    counts = buffer.counts()
    assert len(counts) == 2 * dealt.COUNTS_TOLD
    assert counts[-2:] == [10 + dealt.COUNTS_TOLD + 4, dealt.COUNTS_TOLD + 4]


def test_release_drops_the_splits_below_and_ignores_them_later():
    buffer = filled(0, count=3)
    buffer.open(1, 0)
    buffer.put(1, 0, Raw("1.0"), 8)
    buffer.release(1)
    assert buffer.released == 1
    assert buffer.buffered() == (1, 8)
    assert buffer.take(0, [0]) == ([], None)
    buffer.open(0, 0)  # handed again after release: not kept
    buffer.put(0, 0, Raw("late"), 8)
    assert buffer.buffered() == (1, 8)
    buffer.release(0)  # never goes back
    assert buffer.released == 1


def test_finish_and_clear():
    buffer = filled(0, count=2, end=False)
    assert not buffer.ended
    assert not buffer.finished
    buffer.finish(("INTERNAL", "boom"))
    assert buffer.ended
    assert buffer.finished
    assert buffer.error == ("INTERNAL", "boom")
    assert sorted(i.element for i in buffer.clear()) == ["0.0", "0.1"]
    assert buffer.buffered() == (0, 0)


def test_a_put_waits_for_room_by_count(stop):
    buffer = DealtBuffer(max_items=2, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw(0), 8)
    buffer.put(0, 1, Raw(1), 8)
    putter = Putter(lambda: buffer.put(0, 2, Raw(2), 8, stop))
    assert putter.blocked()
    buffer.take(0, [0])
    assert putter.done()
    assert putter.error is None
    assert buffer.buffered() == (2, 16)


def test_a_put_waits_for_room_by_bytes_but_one_large_item_fits(stop):
    buffer = DealtBuffer(max_items=100, max_bytes=100)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw(0), 1_000)  # an empty buffer takes anything
    putter = Putter(lambda: buffer.put(0, 1, Raw(1), 10, stop))
    assert putter.blocked()
    buffer.take(0, [0])
    assert putter.done()
    assert putter.error is None


def test_release_makes_room(stop):
    buffer = DealtBuffer(max_items=1, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.open(1, 0)
    buffer.put(0, 0, Raw(0), 8)
    putter = Putter(lambda: buffer.put(1, 0, Raw(1), 8, stop))
    assert putter.blocked()
    buffer.release(1)
    assert putter.done()
    assert putter.error is None
    assert taken(buffer, 1, [0]) == [0]


def test_a_put_into_a_split_released_while_it_waited_keeps_nothing(stop):
    buffer = DealtBuffer(max_items=1, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw(0), 8)
    putter = Putter(lambda: buffer.put(0, 1, Raw(1), 8, stop))
    assert putter.blocked()
    buffer.release(1)
    assert putter.done()
    assert putter.error is None
    assert buffer.buffered() == (0, 0)


def test_a_waiting_put_is_cancelled_by_stop(stop):
    buffer = DealtBuffer(max_items=1, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw(0), 8)
    putter = Putter(lambda: buffer.put(0, 1, Raw(1), 8, stop))
    assert putter.blocked()
    stop.set()
    assert putter.done()
    assert isinstance(putter.error, Cancelled)
    assert buffer.buffered() == (1, 8)


# ------------------------------------------------------------------ answer


@pytest.mark.parametrize(
    "bad", [request(-1, 0), request(0), request(0, 2, 1), request(0, 1, 1)]
)
def test_malformed_requests_are_invalid(bad):
    decision = answer(bad, filled())
    assert isinstance(decision, Refuse)
    assert decision.code == "INVALID_ARGUMENT"


def test_a_request_for_elements_not_made_yet_is_parked():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    assert answer(request(2, 0), buffer) is None  # handed, not opened yet
    buffer.open(2, 0)
    assert answer(request(2, 0), buffer) is None  # opened, nothing made
    buffer.put(2, 0, Raw("a"), 8)
    assert answer(request(2, 1), buffer) is None  # element 1 not made
    send = answer(request(2, 0, 1), buffer)  # a partial run goes now
    assert elements(send) == ["a"]
    assert (send.split, send.indices, send.produced, send.ended) == (2, [0], 1, False)


def test_a_whole_run_comes_with_the_split_count_and_the_counts_told():
    buffer = filled(0, count=2)
    buffer.open(1, 0)
    buffer.put(1, 0, Raw("1.0"), 8)
    send = answer(request(1, 0), buffer)
    assert elements(send) == ["1.0"]
    assert (send.produced, send.ended, send.counts) == (1, False, [0, 2])
    send = answer(request(0, 0, 1), buffer)
    assert elements(send) == ["0.0", "0.1"]
    assert (send.indices, send.produced, send.ended) == ([0, 1], 2, True)


def test_past_the_end_of_a_split_the_answer_is_its_count():
    buffer = filled(0, count=2)
    send = answer(request(0, 2, 5), buffer)
    assert elements(send) == []
    assert (send.split, send.indices, send.produced, send.ended) == (0, [], 2, True)
    send = answer(request(0, 1, 4), buffer)  # the part that exists, and the count
    assert elements(send) == ["0.1"]
    assert (send.produced, send.ended) == (2, True)


def test_an_empty_split_tells_its_count():
    buffer = filled(0, count=0)
    send = answer(request(0, 0), buffer)
    assert elements(send) == []
    assert (send.produced, send.ended) == (0, True)


def test_an_element_sent_already_is_refused():
    buffer = filled(0, count=3)
    assert elements(answer(request(0, 1), buffer)) == ["0.1"]
    decision = answer(request(0, 1, 2), buffer)
    assert isinstance(decision, Refuse)
    assert decision.code == "FAILED_PRECONDITION"
    assert "sent already" in decision.text


def test_a_skipped_element_is_refused_like_one_sent():
    buffer = filled(0, count=4, skip=2)
    decision = answer(request(0, 1), buffer)
    assert isinstance(decision, Refuse)
    assert decision.code == "FAILED_PRECONDITION"
    assert elements(answer(request(0, 2), buffer)) == ["0.2"]


def test_a_released_split_is_refused():
    buffer = filled(0, count=3)
    buffer.open(1, 0)
    buffer.release(1)
    decision = answer(request(0, 0), buffer)
    assert isinstance(decision, Refuse)
    assert decision.code == m.ABSENT


def test_a_split_never_opened_is_refused_once_the_producer_is_done():
    buffer = filled(0, count=1)
    assert answer(request(4, 0), buffer) is None  # may still come
    buffer.finish(None)
    decision = answer(request(4, 0), buffer)
    assert isinstance(decision, Refuse)
    assert decision.code == m.ABSENT


def test_a_producer_error_reaches_waiting_readers():
    buffer = filled(0, count=1, end=False)
    assert answer(request(0, 1), buffer) is None
    buffer.finish(("INVALID_ARGUMENT", "the map raised"))
    assert answer(request(0, 1), buffer) == Refuse("INVALID_ARGUMENT", "the map raised")
    assert answer(request(3, 0), buffer) == Refuse("INVALID_ARGUMENT", "the map raised")
    assert elements(answer(request(0, 0), buffer)) == ["0.0"]  # made: still served


def test_encoded_items_are_served_as_they_are():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    buffer.open(0, 0)
    big = Encoded([b"frame"])
    buffer.put(0, 0, big, 1 << 10)
    buffer.end(0, 1)
    send = answer(request(0, 0), buffer)
    assert isinstance(send, DealtSend)
    assert send.items == [big]


# ------------------------------------------------------------------ awaited elements


def holding(later: int) -> DealtBuffer:
    """A full buffer (1 item) of split ``later``: what it makes next is made again."""
    buffer = DealtBuffer(max_items=1, max_bytes=1 << 20)
    buffer.open(later, 0)
    buffer.put(later, 0, Raw("later"), 8)
    return buffer


def test_a_put_goes_one_split_past_the_bound_at_most_while_a_request_awaits_it(stop):
    buffer = DealtBuffer(max_items=1, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw("unasked"), 8)
    assert answer(request(0, 2), buffer) is None  # parked: 2 is awaited
    putter = Putter(lambda: buffer.put(0, 1, Raw(1), 8, stop))
    assert putter.done()  # no wait: its reader may ask for 0 once 2 came
    assert buffer.put(0, 2, Raw(2), 8) is True  # the awaited one: wake the loop
    assert elements(answer(request(0, 2), buffer)) == [2]
    buffer.end(0, 3)
    buffer.open(1, 0)
    assert answer(request(1, 1), buffer) is None  # parked: 1 is awaited
    putter = Putter(lambda: buffer.put(1, 0, Raw("b"), 8, stop))
    assert putter.blocked()  # split 0 holds the bound: a slower rank's share
    buffer.take(0, [0, 1])
    assert putter.done()


def test_a_split_made_again_goes_past_the_bound_while_a_request_awaits_it(stop):
    buffer = holding(5)
    buffer.open(2, 0)  # a lost worker's split, made again here
    assert answer(request(2, 1), buffer) is None  # parked: 1 is awaited
    putter = Putter(lambda: buffer.put(2, 0, Raw(0), 8, stop))
    assert putter.done()  # no wait: readers need split 2 before split 5
    assert putter.error is None
    assert buffer.put(2, 1, Raw(1), 8) is True  # the awaited one: wake the loop
    assert elements(answer(request(2, 1), buffer)) == [1]
    putter = Putter(lambda: buffer.put(2, 2, Raw(2), 8, stop))
    assert putter.blocked()  # nothing awaited any more: bounded again
    buffer.take(2, [0])
    buffer.take(5, [0])
    assert putter.done()


def test_a_split_handed_here_after_the_one_being_made_lets_it_past_the_bound(stop):
    buffer = holding(5)  # nobody locates 5.0 before split 0 is counted
    buffer.open(7, 0)
    putter = Putter(lambda: buffer.put(7, 0, Raw(0), 8, stop))
    assert putter.blocked()  # nothing awaited: the bound holds
    assert answer(request(0, 0), buffer) is None  # split 0, lost, handed here
    assert putter.done()  # this producer opens split 0 once split 7 is made
    assert putter.error is None


def test_a_put_into_a_split_released_before_it_was_made_again_never_waits(stop):
    buffer = holding(6)
    buffer.open(4, 0)  # a lost split made again, which every reader is past
    buffer.release(5)
    putter = Putter(lambda: buffer.put(4, 0, Raw(0), 8, stop))
    assert putter.done()  # it keeps nothing
    assert buffer.buffered() == (1, 8)


def test_open_tells_whether_a_request_waits_for_the_split():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    assert buffer.open(0, 0) is False
    assert answer(request(1, 0), buffer) is None  # split 1: handed, not opened
    assert buffer.open(1, 0) is True  # the data loop serves it again:
    assert answer(request(1, 0), buffer) is None  # now it awaits element 0
    assert buffer.put(1, 0, Raw("a"), 8) is True
    assert elements(answer(request(1, 0), buffer)) == ["a"]


def test_awaits_says_when_the_element_came_meanwhile():
    buffer = filled(0, count=2, end=False)
    assert buffer.awaits(0, 1) is True  # made already: ask again
    assert buffer.awaits(0, 5) is False
    assert buffer.awaits(3, -1) is False
    buffer.open(3, 0)
    assert buffer.awaits(3, -1) is True


# ------------------------------------------------------------------ have notices


def have(split: int, *indices: int, wanted: tuple[int, ...] = ()) -> m.GetElements:
    return m.GetElements(
        task_id=1,
        client_id=1,
        max_elements=max(1, len(wanted)),
        split=split,
        indices=list(wanted),
        have=list(indices),
    )


def test_what_readers_have_of_a_split_made_again_is_dropped_or_never_kept():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, Raw("a"), 8)
    buffer.put(0, 1, Raw("b"), 8)
    send = answer(have(0, 1, 3), buffer)  # a notice alone: nothing to send
    assert isinstance(send, DealtSend)
    assert (send.items, send.indices, send.split) == ([], [], 0)
    assert buffer.buffered() == (1, 8)  # "b" dropped
    for i in range(2, 5):
        buffer.put(0, i, Raw(i), 8)
    assert buffer.buffered() == (3, 24)  # 3 never kept
    assert elements(answer(have(0, wanted=(0,)), buffer)) == ["a"]
    assert elements(answer(request(0, 2), buffer)) == [2]
    assert answer(request(0, 3), buffer) == Refuse(
        "FAILED_PRECONDITION",
        "element 3 of split 0 was sent already (or skipped): was a consumer "
        "restarted under the same job name?",
    )


def test_a_notice_for_a_split_not_opened_yet_waits_for_it():
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    answer(have(2, 0, 2), buffer)
    buffer.open(2, 0)
    for i in range(4):
        buffer.put(2, i, Raw(i), 8)
    assert buffer.buffered() == (2, 16)
    assert taken(buffer, 2, [1]) == [1]
    assert taken(buffer, 2, [3]) == [3]


def test_a_notice_with_the_indices_wanted_answers_them():
    buffer = filled(0, count=4)
    send = answer(have(0, 0, 2, wanted=(1, 3)), buffer)
    assert elements(send) == ["0.1", "0.3"]
    assert buffer.buffered() == (0, 0)


def test_notices_cannot_fill_a_workers_memory():
    buffer = DealtBuffer(max_items=4, max_bytes=1 << 20)
    for ordinal in range(100):  # splits not opened: 64 remembered, 16 indices each
        answer(have(ordinal, *range(1_000)), buffer)
    for ordinal, kept in ((0, list(range(16, 20))), (70, list(range(20)))):
        buffer.open(ordinal, 0)
        took = []
        for i in range(20):  # taken as made: the buffer never fills
            buffer.put(ordinal, i, Raw(i), 8)
            took += taken(buffer, ordinal, [i])
        assert took == kept


def test_a_request_answered_by_the_end_of_its_split_leaves_the_bound_on(stop):
    buffer = holding(3)
    buffer.open(0, 0)
    assert answer(request(0, 5), buffer) is None  # parked: element 5 awaited
    buffer.put(0, 0, Raw(0), 8)  # past the bound: split 3 is held
    buffer.put(0, 1, Raw(1), 8)
    buffer.end(0, 2)
    assert elements(answer(request(0, 5), buffer)) == []  # past the end: answered
    buffer.open(1, 0)
    putter = Putter(lambda: buffer.put(1, 0, Raw("a"), 8, stop))
    assert putter.blocked()  # nothing is awaited any more: the bound holds


def test_a_request_waiting_for_its_split_to_open_leaves_the_bound_on(stop):
    buffer = holding(4)
    assert answer(request(1, 0), buffer) is None  # split 1 not opened: awaited
    assert buffer.open(1, 0) is True
    assert answer(request(1, 0), buffer) is None  # element 0 awaited
    assert buffer.put(1, 0, Raw(0), 8) is True  # past the bound: split 4 is held
    assert elements(answer(request(1, 0), buffer)) == [0]
    putter = Putter(lambda: buffer.put(1, 1, Raw(1), 8, stop))
    assert putter.blocked()


# ------------------------------------------------------------------ blocks


def block(lo: int, n: int) -> Block:
    """Elements ``{"x": lo + i, "s": f"s{lo + i}"}``: an int column and a str one."""
    return Block.of(
        {"x": 0, "s": ""}, [np.arange(lo, lo + n), [f"s{i}" for i in range(lo, lo + n)]]
    )


def rows(items: list[Any]) -> list[int]:
    """The ``x`` of every element ``items`` hold, in order (blocks cut to rows)."""
    out = []
    for item in items:
        assert isinstance(item, Block), item
        out += [int(row["x"]) for row in item.rows()]
    return out


def test_each_consumer_takes_its_rows_of_a_block_as_one_strided_block():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, block(0, 10), 1_000)
    assert buffer.buffered() == (10, 1_000)
    items, _ = buffer.take(0, [1, 4, 7])  # R=3, consumer 1
    assert len(items) == 1
    assert rows(items) == [1, 4, 7]
    assert items[0].rows()[2] == {"x": 7, "s": "s7"}
    assert buffer.buffered() == (7, 700)
    items, _ = buffer.take(0, [0, 3, 6, 9])
    assert rows(items) == [0, 3, 6, 9]
    assert buffer.buffered() == (3, 300)
    assert taken(buffer, 0, [2, 5, 8]) == [2, 5, 8]
    assert buffer.buffered() == (0, 0)
    assert taken(buffer, 0, [2]) == []  # taken once


def test_rows_not_evenly_spaced_are_picked_and_a_run_spans_blocks():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, block(0, 4), 40)
    buffer.put(0, 4, Raw("single"), 8)  # a large element of a block goes alone
    buffer.put(0, 5, block(5, 4), 40)
    items, _ = buffer.take(0, [0, 1, 3, 4, 6, 8])
    assert rows(items[:1]) == [0, 1, 3]
    assert items[1] == Raw("single")
    assert rows(items[2:]) == [6, 8]
    assert count(items) == 6


def test_a_run_stops_at_a_row_taken_or_not_made():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, block(0, 6), 60)
    assert taken(buffer, 0, [3]) == [3]
    assert taken(buffer, 0, [1, 2, 3, 4]) == [1, 2]  # 3 is gone
    assert taken(buffer, 0, [4, 5, 6, 7]) == [4, 5]  # 6 is not made
    buffer.put(0, 6, block(6, 2), 20)
    assert taken(buffer, 0, [6, 7]) == [6, 7]
    assert buffer.buffered() == (1, 10)  # row 0


def test_the_rows_left_are_copied_out_once_half_are_taken():
    """So that a block never holds more than twice the bytes counted."""
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    made = block(0, 8)
    buffer.put(0, 0, made, 800)
    items, _ = buffer.take(0, [0, 2, 4])  # 5 of 8 left: still the block's rows
    assert rows(items) == [0, 2, 4]
    assert np.shares_memory(items[0].columns[0], made.columns[0])
    items, _ = buffer.take(0, [6])  # 4 of 8 left: copied out
    assert buffer.buffered() == (4, 400)
    items, _ = buffer.take(0, [1, 3, 5])
    assert rows(items) == [1, 3, 5]
    assert not np.shares_memory(items[0].columns[0], made.columns[0])
    assert items[0].columns[1] == ["s1", "s3", "s5"]
    assert rows(buffer.take(0, [7])[0]) == [7]
    assert buffer.buffered() == (0, 0)


def test_a_block_keeps_no_row_below_the_skip_nor_one_consumers_have():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, skip=3)
    answer(have(0, 5), buffer)  # made again: consumers have 5 already
    buffer.put(0, 0, block(0, 8), 800)
    assert buffer.buffered() == (4, 400)  # 3, 4, 6, 7
    answer(have(0, 6), buffer)
    assert buffer.buffered() == (3, 300)
    assert rows(answer(request(0, 3, 4), buffer).items) == [3, 4]
    decision = answer(request(0, 5), buffer)
    assert isinstance(decision, Refuse)  # had: never sent by this worker
    assert rows(answer(request(0, 7), buffer).items) == [7]
    assert buffer.buffered() == (0, 0)


def test_a_block_waits_for_room_for_all_its_elements(stop):
    buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.put(0, 0, block(0, 4), 40)
    putter = Putter(lambda: buffer.put(0, 4, block(4, 6), 60, stop))
    assert putter.blocked()  # 4 + 6 > 8
    assert taken(buffer, 0, [0, 1]) == [0, 1]
    assert putter.done()
    assert putter.error is None
    assert buffer.buffered() == (8, 80)


def test_a_block_wakes_a_request_for_any_of_its_elements():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    assert answer(request(0, 5, 7), buffer) is None  # parked: 5 awaited
    assert buffer.put(0, 0, block(0, 4), 40) is False
    assert buffer.put(0, 4, block(4, 4), 40) is True
    send = answer(request(0, 5, 7), buffer)
    assert rows(send.items) == [5, 7]
    assert (send.indices, send.produced) == ([5, 7], 8)


def test_released_and_cleared_blocks_are_counted_out():
    buffer = DealtBuffer(max_items=64, max_bytes=1 << 20)
    buffer.open(0, 0)
    buffer.open(1, 0)
    buffer.put(0, 0, block(0, 4), 40)
    buffer.take(0, [0])
    buffer.put(1, 0, block(10, 4), 40)
    buffer.release(1)
    assert buffer.buffered() == (4, 40)
    assert rows(buffer.clear()) == [10, 11, 12, 13]
    assert buffer.buffered() == (0, 0)
