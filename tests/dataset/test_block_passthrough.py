"""``repeat``, ``take`` and ``skip`` pass their input's blocks on: the same elements as one at a time."""

from __future__ import annotations

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from zmqdata._dataset.iterator import IterContext
from zmqdata._dataset.node import make_iterator


def by_blocks(ds: zd.Dataset, limit: int = 7) -> list[int] | None:
    iterator = make_iterator(ds._node, IterContext())
    out: list[int] = []
    while (block := iterator.next_block(limit)) is not None:
        if not block.n:
            return out
        out += ints(block.rows())
    return None


@pytest.mark.parametrize(
    "ds",
    [
        zd.Dataset.range(20).repeat(3),
        zd.Dataset.range(20).take(13),
        zd.Dataset.range(20).skip(5),
        zd.Dataset.range(20).skip(-1),
        zd.Dataset.range(20).skip(5).take(9).repeat(2),
        zd.Dataset.range(0).repeat(2),
    ],
    ids=["repeat", "take", "skip", "skip_all", "nested", "empty"],
)
def test_blocks_through_position_ops_are_the_elements(ds):
    assert by_blocks(ds) == ints(ds)


def test_a_shard_reads_one_element_at_a_time():
    assert by_blocks(zd.Dataset.range(20).shard(2, 1)) is None
