"""Split runs: a read taken over at any element makes exactly what was not received.

A worker of an exactly-once read runs the pipeline up to its last expanding op
one split at a time and keys the outputs (``_dataset/ops/split_runs.py``).
Each composition of ops (``test_lineage.pipelines``) is read that way; a
consumer "receives" a prefix of its elements and the keys they claim; the
keys nobody claimed are handed out again as parts of splits, as the
dispatcher does after a worker loss or for a resumed read. The second read
must make exactly the leaf values not received: none lost, none twice.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.test_lineage import SETTINGS, pipelines, values
from zmqdata._dataset.iterator import IterContext, ListSplitProvider, Split
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops.split_runs import by_split
from zmqdata._wire import outputs
from zmqdata._wire.lineage import Lineage, Ranges, join, size

pytestmark = pytest.mark.timeout(60)

N = 30
REFUSED = {"take", "skip", "shard", "enumerate", "umap", "uinterleave"}
"""Refused at job creation (``split_runs.check_pipeline``): not a function of the split."""
EXPANDING = {"interleave", "unbatch"}


def comparable(names: list[str]) -> bool:
    """Whether the leaves of a taken-over read can be compared with the first read's.

    Not with a remainder dropped (which elements fall in it depends on how a
    run groups them), nor with a ``filter`` of batches formed above the last
    expanding op (a second run groups the outputs left otherwise).
    """
    if REFUSED & set(names) or "drop" in names:
        return False
    last = max((i for i, name in enumerate(names) if name in EXPANDING), default=-1)
    above = names[last + 1 :]
    return not ("batch" in above and "filter" in above[above.index("batch") :])


def read(ds: zd.Dataset, splits: list[Split]) -> list[tuple[Any, Lineage]]:
    """Every element with the output keys it claims, as a worker buffers them."""
    root, runs = by_split(ds._node)
    ctx = IterContext(
        split_source=runs, split_provider=ListSplitProvider(splits), lineage=True
    )
    with make_iterator(root, ctx) as it:
        return [(element, it.lineage) for element in it]


def again(keys: Ranges, bounds: list[int]) -> list[Split]:
    """Keys handed out again, as split parts ``[0, lo, hi, first, end]``."""
    count = len(bounds) - 1
    parts = []
    for first, end in keys.ranges():
        while first < end:
            _, split, _ = outputs.locate(first, count)
            part_end = min(end, outputs.split_base(first) + outputs.PER_SPLIT)
            parts.append([0, bounds[split], bounds[split + 1], first, part_end])
            first = part_end
    return parts


def take_over(
    build: Any, cuts: list[int], fraction: float
) -> tuple[Counter[int], Counter[int], Counter[int]]:
    """Reads ``build(range(N))``, a consumer receiving ``fraction`` of it, then
    reads again the keys it did not claim: the values received, those not
    received, and those the second read made."""
    bounds = sorted({0, N, *cuts})
    count = len(bounds) - 1
    splits = [
        [0, lo, hi, outputs.base(0, k, count), outputs.base(0, k + 1, count)]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    out = read(build(zd.Dataset.range(N)), splits)
    taken = int(fraction * len(out))
    owed = Ranges([splits[0][3], splits[-1][4]])
    for _, lineage in out[:taken]:
        owed.remove_all(lineage)
    made = read(build(zd.Dataset.range(N)), again(owed, bounds))

    def counted(elements: list[tuple[Any, Lineage]]) -> Counter[int]:
        return Counter(v for element, _ in elements for v in values(element))

    return counted(out[:taken]), counted(out[taken:]), counted(made)


@SETTINGS
@given(
    pipeline=pipelines(),
    cuts=st.lists(st.integers(0, N), min_size=1, max_size=4, unique=True),
    fraction=st.floats(0, 1),
)
def test_a_read_taken_over_makes_each_element_not_received_once(
    pipeline, cuts, fraction
):
    names, build = pipeline
    if not comparable(names):
        return
    _, rest, made = take_over(build, cuts, fraction)
    assert made == rest, (names, made - rest, rest - made)


def test_nested_interleaves_lose_no_output():
    """The case marks lost (an interleave above another expanding op)."""

    def build(ds: zd.Dataset) -> zd.Dataset:
        twice = ds.batch(2).interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(2), cycle_length=2
        )
        return twice.interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(2), cycle_length=5
        )

    for fraction in (0.1, 0.37, 0.5, 0.9):
        _, rest, made = take_over(build, [0, 7, 18], fraction)
        assert made == rest


@pytest.mark.parametrize(
    "build",
    [
        lambda ds: ds.filter(lambda x: x % 3 > 0).interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(3), cycle_length=2
        ),
        lambda ds: ds.batch(4).unbatch().shuffle(8, seed=1),
        lambda ds: (
            ds.interleave(lambda x: zd.Dataset.from_tensors(x).repeat(3))
            .shuffle(64, seed=2)
            .filter(lambda x: x % 4 > 0)
            .shuffle(8, seed=3)
            .batch(8)
        ),
    ],
    ids=["filter-interleave", "batch-unbatch-shuffle", "interleave-shuffle-batch"],
)
def test_the_compositions_the_outside_check_found_are_exact(build):
    for fraction in (0.2, 0.5, 0.8):
        _, rest, made = take_over(build, [5, 11, 23], fraction)
        assert made == rest


def _until_error(ds: zd.Dataset, splits: list[Split]) -> tuple[list[Any], str]:
    """The elements and lineages read before the pipeline raised, and the error."""
    root, runs = by_split(ds._node)
    ctx = IterContext(
        split_source=runs, split_provider=ListSplitProvider(splits), lineage=True
    )
    got: list[Any] = []
    with make_iterator(root, ctx) as it:
        try:
            for element in it:
                got.append((element.tolist(), it.lineage))
        except ValueError as error:
            return got, str(error)
    return got, ""


def test_batches_take_a_runs_outputs_at_once_as_they_took_them_one_by_one(
    monkeypatch,
):
    def row(x: Any) -> Any:
        if x == 9:
            raise ValueError("row 9")
        return np.full((2, 1), x)

    ds = zd.Dataset.range(12).map(row).unbatch().batch(5)
    first, second = outputs.base(0, 0, 2), outputs.base(0, 1, 2)
    splits = [[0, 0, 6, first + 1, first + 12], [0, 6, 12, second, second + 12]]
    many = _until_error(ds, splits)
    monkeypatch.setattr(
        "zmqdata._dataset.ops.split_runs._SplitRunsIterator.next_many",
        lambda self, limit: None,
    )
    assert many == _until_error(ds, splits)
    assert many[1] == "row 9"
    assert many[0][0] == ([[0], [1], [1], [2], [2]], (first + 1, first + 6))


def read_by_blocks(
    ds: zd.Dataset, splits: list[Split], limit: int
) -> list[tuple[Any, Lineage]] | None:
    """``read``, as a worker takes blocks where the pipeline gives them (else None)."""
    root, runs = by_split(ds._node)
    ctx = IterContext(
        split_source=runs, split_provider=ListSplitProvider(splits), lineage=True
    )
    out: list[tuple[Any, Lineage]] = []
    with make_iterator(root, ctx) as it:
        while (block := it.next_block(limit)) is not None:
            if not block.n:
                return out
            out += zip(block.rows(), block.lineages(it.lineage), strict=True)
    return None


@SETTINGS
@given(
    pipeline=pipelines(),
    cuts=st.lists(st.integers(0, N), min_size=1, max_size=4, unique=True),
    skipped=st.integers(0, 3),
    limit=st.sampled_from([1, 3, 64]),
)
def test_blocks_of_split_runs_are_its_elements_with_their_keys(
    pipeline, cuts, skipped, limit
):
    """Split runs hand out blocks (outputs of a split made again skipped, owed keys
    claimed by the next element) standing for what their elements do one by one."""
    names, build = pipeline
    if REFUSED & set(names):
        return
    bounds = sorted({0, N, *cuts})
    count = len(bounds) - 1
    splits = [  # the first outputs of each split delivered before; its end short
        [0, lo, hi, outputs.base(0, k, count) + skipped, outputs.base(0, k, count) + 40]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    blocks = read_by_blocks(build(zd.Dataset.range(N)), splits, limit)
    if blocks is None:
        return  # a pipeline that makes its elements one at a time
    one_by_one = read(build(zd.Dataset.range(N)), splits)
    assert [values(e) for e, _ in blocks] == [values(e) for e, _ in one_by_one]
    assert_same_keys(blocks, one_by_one)


def assert_same_keys(
    blocks: list[tuple[Any, Lineage]], one_by_one: list[tuple[Any, Lineage]]
) -> None:
    """Each key claimed once, those of one by one included, in the same order.

    A filter's dropped keys may go with the element before them in a block
    (the last one's too) rather than with the one after them: a task reports
    the keys nothing claimed as dropped at its end, so either is exact.
    """
    claimed, usual = joined(blocks), joined(one_by_one)
    union = Ranges()
    union.add_all(claimed)
    assert size(claimed) == size(union)  # none twice
    assert claimed[: len(usual) - 1] == usual[:-1]
    assert claimed[len(usual) - 1] >= usual[-1] if usual else True


def joined(elements: list[tuple[Any, Lineage]]) -> Lineage:
    return functools.reduce(join, (lineage for _, lineage in elements), ())


@pytest.mark.parametrize(
    "build",
    [
        lambda ds: ds.batch(3).unbatch(),
        lambda ds: ds.batch(3).unbatch().batch(4),
        lambda ds: ds.batch(3).unbatch().filter(lambda x: x % 3 != 0),
        lambda ds: ds.map(lambda x: x).batch(2).unbatch(),
    ],
    ids=["unbatch", "rebatch", "filter", "map_unbatch"],
)
def test_split_runs_below_block_ops_give_blocks(build):
    bounds = [0, 7, 18, N]
    splits = [
        [0, lo, hi, outputs.base(0, k, 3) + 2, outputs.base(0, k, 3) + 40]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    blocks = read_by_blocks(build(zd.Dataset.range(N)), splits, 4)
    one_by_one = read(build(zd.Dataset.range(N)), splits)
    assert blocks is not None
    assert [values(e) for e, _ in blocks] == [values(e) for e, _ in one_by_one]
    assert_same_keys(blocks, one_by_one)
