"""``repeat``, ``take`` and ``skip`` pass their input's blocks on: the same elements as one at a time."""

from __future__ import annotations

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops.source import find_split_source


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


def with_lineage(ds: zd.Dataset, by_blocks: bool) -> list[tuple[int, tuple[int, ...]]]:
    """Each element and the keys it stands for, by blocks or one at a time."""
    node = ds._node
    ctx = IterContext(
        find_split_source(node), ListSplitProvider([[0, 20, 100]]), lineage=True
    )
    out: list[tuple[int, tuple[int, ...]]] = []
    with make_iterator(node, ctx) as iterator:
        if not by_blocks:
            return [(int(x), iterator.lineage) for x in iterator]
        while (block := iterator.next_block(4)) is not None and block.n:
            out += zip(
                ints(block.rows()), block.lineages(iterator.lineage), strict=True
            )
    return out


@pytest.mark.parametrize(
    "ds",
    [
        zd.Dataset.range(20).skip(5),
        zd.Dataset.range(20).take(7),
        zd.Dataset.range(20).filter(lambda x: x % 3 > 0).skip(4).take(6),
        zd.Dataset.range(20).skip(3).repeat(2),
    ],
    ids=["skip", "take", "filter_skip_take", "skip_repeat"],
)
def test_with_lineage_blocks_stand_for_what_their_elements_do_one_by_one(ds):
    """A skip's first element kept stands for the keys it skipped, block or not."""
    assert with_lineage(ds, by_blocks=True) == with_lineage(ds, by_blocks=False)
