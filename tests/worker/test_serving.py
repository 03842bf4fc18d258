"""``serving``: what a worker sends for a first-come request, given its buffer or cache."""

from __future__ import annotations

from typing import Any

import numpy as np

from zmqdata._dataset.block import Block
from zmqdata._wire import messages as m
from zmqdata._worker.buffer import Item, Raw, TaskBuffer, count
from zmqdata._worker.cache import SlidingWindowCache
from zmqdata._worker.serving import Refuse, Send, from_buffer, from_cache


def _request(max_elements: int = 8, **fields: Any) -> m.GetElements:
    return m.GetElements(task_id=3, client_id=1, max_elements=max_elements, **fields)


def _buffer(*elements: int) -> TaskBuffer:
    buffer = TaskBuffer(max_items=100, max_bytes=2**20)
    for element in elements:
        buffer.put(Raw(element), 8)
    return buffer


def test_everything_buffered_goes_up_to_the_credit() -> None:
    buffer = _buffer(1, 2, 3)
    assert from_buffer(_request(2), buffer) == Send([Raw(1), Raw(2)], False)
    assert from_buffer(_request(2), buffer) == Send([Raw(3)], False)
    assert from_buffer(_request(2), buffer) is None  # park until the producer adds


def test_the_last_items_carry_the_end_of_the_sequence() -> None:
    buffer = _buffer(1)
    buffer.finish(None)
    assert from_buffer(_request(), buffer) == Send([Raw(1)], True)
    assert from_buffer(_request(), buffer) == Send([], True)


def test_a_failed_producer_sends_its_items_then_its_error() -> None:
    buffer = _buffer(1)
    buffer.finish(("DATA_LOSS", "boom"))
    assert from_buffer(_request(), buffer) == Send([Raw(1)], False)
    assert from_buffer(_request(), buffer) == Refuse("DATA_LOSS", "boom")


def test_the_cross_trainer_cache_serves_each_trainer_from_its_position() -> None:
    cache: SlidingWindowCache[Item] = SlidingWindowCache(max_bytes=2**20)
    for element in (1, 2):
        cache.put(Raw(element), 8)
    assert from_cache(_request(1, trainer_id="a"), cache) == Send([Raw(1)], False)
    assert from_cache(_request(5, trainer_id="b"), cache) == Send(
        [Raw(1), Raw(2)], False
    )
    assert from_cache(_request(5, trainer_id="b"), cache) is None
    refused = from_cache(_request(), cache)
    assert isinstance(refused, Refuse)
    assert refused.code == "INVALID_ARGUMENT"


def test_a_failed_cache_refuses_a_trainer_at_its_end() -> None:
    cache: SlidingWindowCache[Item] = SlidingWindowCache(max_bytes=2**20)
    cache.put(Raw(1), 8)
    cache.finish(("DATA_LOSS", "boom"))
    assert from_cache(_request(trainer_id="a"), cache) == Send([Raw(1)], False)
    assert from_cache(_request(trainer_id="a"), cache) == Refuse("DATA_LOSS", "boom")


def test_a_tracked_reply_says_what_its_elements_cover_and_the_end_what_was_dropped() -> (
    None
):
    buffer = TaskBuffer(max_items=8, max_bytes=1024, tracked=True)
    buffer.handed(0, 10)
    for k in (3, 4, 9):
        buffer.put(Raw(k), 8, lineage=(k, k + 1))
    request = _request(2)
    first = from_buffer(request, buffer, tracked=True)
    assert isinstance(first, Send)
    assert first.coverage is not None
    assert (first.coverage.keys, first.coverage.widths) == ([3, 5], [2, 1])
    buffer.finish(None)  # handed 0..9, output 3, 4 and 9: the rest was dropped
    last = from_buffer(request, buffer, tracked=True)
    assert isinstance(last, Send)
    assert last.coverage is not None
    assert last.end_of_sequence
    assert (last.coverage.keys, last.coverage.widths) == ([9, 10, 0, 3, 5, 9], [1, 1])
    untracked = from_buffer(request, buffer)
    assert isinstance(untracked, Send)
    assert untracked.coverage is None


def test_a_block_is_cut_at_the_credit_and_its_keys_with_it() -> None:
    buffer = TaskBuffer(max_items=100, max_bytes=2**20, tracked=True)
    buffer.handed(100, 110)
    block = Block.of(0, [np.arange(10)])
    buffer.put(block, 80, lineage=(100, 110))
    assert buffer.buffered() == (10, 80)
    first = from_buffer(_request(3), buffer, tracked=True)
    assert isinstance(first, Send)
    assert first.coverage is not None
    assert [item.rows() for item in first.items] == [[0, 1, 2]]  # type: ignore[union-attr]
    assert (first.coverage.keys, first.coverage.widths) == ([100, 103], [3, 1])
    assert buffer.buffered() == (7, 56)
    buffer.put(Raw(np.int64(10)), 8, lineage=(110, 111))
    rest = from_buffer(_request(100), buffer, tracked=True)
    assert isinstance(rest, Send)
    assert rest.coverage is not None
    assert count(rest.items) == 8
    assert (rest.coverage.keys, rest.coverage.widths) == ([103, 111], [8, 1])
    buffer.finish(None)
    assert buffer.dropped == ()


def test_a_block_of_wider_elements_is_cut_with_their_keys() -> None:
    buffer = TaskBuffer(max_items=100, max_bytes=2**20, tracked=True)
    buffer.handed(100, 120)
    batches = Block.of(0, [np.arange(8).reshape(4, 2)], widths=np.array([2, 5, 1, 3]))
    buffer.put(batches, 64, lineage=(100, 104, 110, 117))  # a filter's, a batch's keys
    first = from_buffer(_request(2), buffer, tracked=True)
    assert isinstance(first, Send)
    assert first.coverage is not None
    assert (first.coverage.keys, first.coverage.widths) == (
        [100, 104, 110, 113],
        [1, 2, 1, 5],
    )
    rest = from_buffer(_request(100), buffer, tracked=True)
    assert isinstance(rest, Send)
    assert rest.coverage is not None
    assert (rest.coverage.keys, rest.coverage.widths) == ([113, 117], [1, 1, 1, 3])
    buffer.finish(None)
    assert buffer.dropped == (104, 110, 117, 120)
