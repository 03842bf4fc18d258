"""``Gather``: small elements made one at a time become blocks, in order, standing for their keys."""

from __future__ import annotations

import numpy as np

from tests.dataset.checks import assert_bit_equal
from zmqdata._wire import frames
from zmqdata._wire.lineage import EMPTY
from zmqdata._worker.gather import (
    BLOCK_ELEMENTS,
    MAX_WAIT_S,
    SLOW_S,
    SMALL_BYTES,
    Gather,
    Ready,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(gather: Gather, elements, lineages=None) -> list[Ready]:
    lineages = lineages or [EMPTY] * len(elements)
    out = []
    for element, lineage in zip(elements, lineages, strict=True):
        out += gather.add(element, lineage)
    return out + gather.flush()


def unpacked(ready: list[Ready]) -> list:
    """The elements, in order, as the trainer decodes them."""
    out = []
    for entry in ready:
        if entry.alone:
            out.append(entry.item)
        else:
            block = entry.item
            encoded = frames.encode_block(block.first, block.columns, block.n)
            out += frames.decode(encoded)[0]
    return out


def rows(n: int, start: int = 0) -> list[dict]:
    return [
        {"i": np.int64(i), "x": np.float32(i / 2), "s": f"r{i}", "v": np.arange(3) + i}
        for i in range(start, start + n)
    ]


def test_rows_of_one_structure_become_one_block_that_decodes_to_them() -> None:
    elements = rows(10)
    ready = run(Gather(True, Clock()), elements)
    assert [entry.item.n for entry in ready] == [10]
    assert_bit_equal(unpacked(ready), elements)


def test_a_block_stands_for_its_elements_keys_in_order_even_apart() -> None:
    keys = [7, 3, 4, 9, 1]  # a shuffle's order: one key each
    ready = run(Gather(True, Clock()), rows(5), [(k, k + 1) for k in keys])
    assert ready[0].lineage == (7, 8, 3, 5, 9, 10, 1, 2)


def test_other_structures_start_a_new_block_and_order_is_kept() -> None:
    elements = [*rows(3), (np.int64(1), "a"), (np.int64(2), "b"), *rows(2, 3)]
    ready = run(Gather(True, Clock()), elements)
    assert [entry.item.n for entry in ready] == [3, 2, 2]
    assert_bit_equal(unpacked(ready), elements)


def test_large_elements_go_alone_after_the_block() -> None:
    big = {"i": np.int64(99), "x": np.float32(0), "s": "", "v": np.zeros(SMALL_BYTES)}
    elements = [*rows(2), big, *rows(2, 2)]
    lineages = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    ready = run(Gather(True, Clock()), elements, lineages)
    assert [(entry.alone, entry.lineage) for entry in ready] == [
        (False, (0, 2)),
        (True, (2, 3)),
        (False, (3, 5)),
    ]
    assert_bit_equal(unpacked(ready), elements)


def test_elements_of_several_keys_or_none_join_the_block_by_their_widths() -> None:
    lineages = [(0, 1), (1, 4), (), (6, 7, 9, 10)]  # a filter's; a restored group's
    [ready] = run(Gather(True, Clock()), rows(4), lineages)
    assert ready.lineage == (0, 4, 6, 7, 9, 10)
    assert ready.item.widths.tolist() == [1, 3, 0, 2]
    assert ready.item.lineages(ready.lineage) == lineages


def test_untracked_blocks_stand_for_no_keys() -> None:
    [ready] = run(Gather(False, Clock()), rows(3))
    assert ready.lineage == EMPTY
    assert ready.item.widths is None


def test_unencodable_elements_go_alone_for_the_producer_to_refuse() -> None:
    odd = {"bad": object()}
    ready = run(Gather(True, Clock()), [*rows(2), odd])
    assert ready[-1] == Ready(odd, EMPTY, 0, alone=True)


def test_ragged_arrays_gather_as_copies_that_pin_no_larger_array() -> None:
    base = np.arange(1_000, dtype=np.int32)
    elements = [(np.int64(i), base[i : i + 1 + i % 4]) for i in range(8)]
    [ready] = run(Gather(True, Clock()), elements)
    column = ready.item.columns[1]
    assert column.dtype == object
    assert all(piece.base is None for piece in column)
    assert_bit_equal(unpacked([ready]), elements)


def test_a_full_block_goes() -> None:
    gather = Gather(True, Clock())  # the clock stands still: only the count flushes
    out = run(gather, [np.int64(i) for i in range(BLOCK_ELEMENTS + 1)])
    assert [entry.item.n for entry in out] == [BLOCK_ELEMENTS, 1]


def test_slow_elements_go_at_once_and_a_block_waits_at_most_max_wait() -> None:
    clock = Clock()
    gather = Gather(False, clock)
    clock.now = 1.0
    assert gather.add(np.int64(0), EMPTY) != []  # slow: came long after the last
    out = []
    for index in range(1, 1_000):
        clock.now += SLOW_S / 4
        out += gather.add(np.int64(index), EMPTY)
    sizes = [entry.item.n for entry in out]
    assert sizes
    assert max(sizes) <= MAX_WAIT_S / (SLOW_S / 4) + 2


def test_a_wait_to_put_does_not_count_as_a_slow_element() -> None:
    clock = Clock()
    gather = Gather(False, clock)
    out = run(gather, [np.int64(i) for i in range(BLOCK_ELEMENTS)])
    clock.now += 1.0  # the producer waited for room, then is back
    gather.resumed()
    assert gather.add(np.int64(0), EMPTY) == []
    assert out


def test_rows_whose_leaf_types_or_keys_differ_do_not_join_the_block() -> None:
    elements = [
        {"a": np.int64(1), "s": "x"},
        {"a": np.int64(2), "s": "yy"},
        {"a": np.int32(3), "s": "z"},  # another dtype
        {"s": "w", "a": np.int32(4)},  # another key order
        {"a": 5, "s": b"v"},  # Python scalars
    ]
    ready = run(Gather(True, Clock()), elements)
    assert [entry.item.n for entry in ready] == [2, 1, 1, 1]
    assert_bit_equal(unpacked(ready), elements)
