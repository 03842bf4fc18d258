"""Ops over blocks: ``map(vectorized=True)``, ``filter``, ``batch`` and ``unbatch``.

What an op hands out a block at a time (``next_block``) is what it hands out
one element at a time, and both are what the op made before it read blocks:
the reference runs the same ops over ``from_generator`` of the source's rows,
which reads no blocks. With lineage, a block's elements stand for its keys in
order (``Block.widths``): no key twice, none early, none lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.dataset.test_lineage import check_invariant, key_of, values
from tests.dataset.test_parquet import (  # noqa: F401 (fixture)
    corrupt_file,
    files,
    table,
    write,
)
from zmqdata._dataset.block import Block
from zmqdata._dataset.iterator import DatasetIterator, IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._wire.lineage import Lineage
from zmqdata.errors import InvalidArgumentError

TENSORS = {
    "x": np.arange(60, dtype=np.float32).reshape(20, 3),
    "y": (
        np.arange(20, dtype=">i2"),
        np.array([f"s{'a' * (i % 5)}" for i in range(20)]),
    ),
    "ok": np.arange(20) % 3 == 0,
}
"""Numbers, big-endian ones, text of several widths, booleans."""

SPLITS = [[0, 4, 100], [4, 9, 200], [9, 12, 300], [12, 20, 400]]


def double(x: Any) -> Any:
    return x * 2


def rows_of(x: Any) -> Any:
    return {"x": x, "sq": x * x}


def scaled(row: dict[str, Any]) -> dict[str, Any]:
    return {"x": row["x"] * 2, "y": (row["y"][0] + 1, row["y"][1]), "ok": row["ok"]}


PIPELINES: dict[str, Callable[[zd.Dataset, bool], zd.Dataset]] = {
    "batch": lambda ds, v: ds.batch(4),
    "batch-drop": lambda ds, v: ds.batch(3, drop_remainder=True),
    "batch-1": lambda ds, v: ds.batch(1),
    "batch-big": lambda ds, v: ds.batch(64),
    "filter": lambda ds, v: ds.filter(lambda e: keep(e)),
    "filter-none": lambda ds, v: ds.filter(lambda e: False),
    "filter-batch": lambda ds, v: ds.filter(lambda e: keep(e)).batch(2),
    "map": lambda ds, v: ds.map(shape(v), vectorized=v),
    "map-filter-batch": lambda ds, v: (
        ds.map(shape(v), vectorized=v).filter(lambda e: keep(e)).batch(3)
    ),
    "batch-unbatch": lambda ds, v: ds.batch(3).unbatch(),
    "batch-batch": lambda ds, v: ds.batch(2, drop_remainder=True).batch(3),
    "unbatch-batch": lambda ds, v: ds.batch(5).unbatch().batch(4),
}


def keep(element: Any) -> bool:
    """Some elements, whatever their structure (a row of range, of the tensors, of Parquet)."""
    first = element if not isinstance(element, dict) else next(iter(element.values()))
    return bool(np.asarray(first).reshape(-1)[0] % 3 != 1)


def shape(vectorized: bool) -> Callable[[Any], Any]:
    """A map that works on rows and on columns alike: numbers kept (``+ 0``), the rest not."""

    def fn(element: Any) -> Any:
        if isinstance(element, dict):
            return {
                k: v + 0
                for k, v in element.items()
                if np.asarray(v).dtype.kind in "iuf"
            }
        return element + 0

    return fn


def sources(parquet: list[str]) -> dict[str, zd.Dataset]:
    return {
        "range": zd.Dataset.range(3, 60, 2),
        "tensors": zd.Dataset.from_tensor_slices(TENSORS),
        "parquet": zd.Dataset.from_parquet(parquet, columns=["i", "f", "s", "v", "t"]),
    }


def reference(ds: zd.Dataset, pipeline: Callable[..., zd.Dataset]) -> list[Any]:
    """The pipeline over the rows of ``ds`` one at a time (a generator reads no blocks)."""
    rows = list(ds)
    return list(pipeline(zd.Dataset.from_generator(lambda: iter(rows)), False))


def by_blocks(
    it: DatasetIterator, limit: int
) -> tuple[list[Any], list[Lineage], list[Block]]:
    """``it``'s elements read a block at a time, what each stands for, and the blocks.

    One at a time where ``it`` makes no block (a lineage ``unbatch``).
    """
    rows: list[Any] = []
    lineages: list[Lineage] = []
    blocks: list[Block] = []
    while (block := it.next_block(limit)) is not None and block.n:
        assert 0 < block.n <= limit
        blocks.append(block)
        rows += block.rows()
        lineages += block.lineages(it.lineage)
    if block is None:
        assert not blocks, "an iterator that made a block makes them to the end"
        for element in it:
            rows.append(element)
            lineages.append(it.lineage)
    return rows, lineages, blocks


def context(ds: zd.Dataset, splits: list[list[int]] | None, lineage: bool = False):
    if splits is None:
        return IterContext()
    source = find_split_source(ds._node)
    return IterContext(source, ListSplitProvider(splits), lineage=lineage)


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("source", ["range", "tensors", "parquet"])
@pytest.mark.parametrize("limit", [1, 3, 1000])
def test_blocks_and_elements_are_what_rows_one_at_a_time_make(
    files,  # noqa: F811
    source,
    pipeline,
    limit,
):
    base = sources(files)[source]
    make = PIPELINES[pipeline]
    expected = reference(base, make)
    for vectorized in (False, True):
        ds = make(base, vectorized)
        assert_bit_equal(list(ds), expected, "one at a time")
        with make_iterator(ds._node, IterContext()) as it:
            rows, _, blocks = by_blocks(it, limit)
        assert blocks or not expected or ("map" in pipeline and not vectorized)
        assert_bit_equal(rows, expected, "blocks")


@pytest.mark.parametrize("pipeline", ["batch", "filter-batch", "map-filter-batch"])
def test_splits_read_in_blocks_give_what_they_give_one_at_a_time(pipeline):
    ds = PIPELINES[pipeline](zd.Dataset.range(20), True)
    splits = [[2, 9], [12, 13], [14, 20]]
    with make_iterator(ds._node, context(ds, splits)) as it:
        expected = list(it)
    with make_iterator(ds._node, context(ds, splits)) as it:
        rows, _, blocks = by_blocks(it, 2)
    assert blocks
    assert_bit_equal(rows, expected)


def test_batches_of_text_are_as_wide_as_their_longest():
    text = np.array(["a", "bbb", "cc", "", "dddd", "e", "ff", "g", "h"])
    ds = zd.Dataset.from_tensor_slices(text).batch(2)
    batches = list(ds)
    assert [b.dtype.str for b in batches] == ["<U3", "<U2", "<U4", "<U2", "<U1"]
    with make_iterator(ds._node, IterContext()) as it:
        rows, _, blocks = by_blocks(it, 100)
    assert [b.n for b in blocks] == [1, 1, 1, 1, 1]  # each width its own block
    assert_bit_equal(rows, batches)
    same = zd.Dataset.from_tensor_slices(np.array(["ab", "cd"] * 6)).batch(2)
    with make_iterator(same._node, IterContext()) as it:
        assert [b.n for b in by_blocks(it, 100)[2]] == [6]


def test_a_block_of_batches_is_one_column_per_leaf_and_the_partial_batch_its_own():
    ds = zd.Dataset.from_tensor_slices(TENSORS).batch(6)
    with make_iterator(ds._node, IterContext()) as it:
        full = it.next_block(100)
        assert full.n == 3
        assert full.columns[0].shape == (3, 6, 3)
        assert full.columns[1].dtype == np.dtype("int16")  # native, as stacked
        last = it.next_block(100)
        assert last.n == 1
        assert last.columns[0].shape == (1, 2, 3)
        assert it.next_block(100).n == 0


def test_unbatch_of_ragged_lists_and_arrays_cuts_rows_from_joined_columns(
    files,  # noqa: F811
):
    lists = zd.Dataset.from_parquet(files, columns=["l"]).map(lambda r: r["l"])
    rows = list(lists.unbatch())
    assert len(rows) == sum(len(x) for x in lists)
    ds = zd.Dataset.from_tensor_slices(np.arange(24).reshape(6, 2, 2)).unbatch()
    with make_iterator(ds._node, IterContext()) as it:
        rows, _, blocks = by_blocks(it, 5)
    assert [b.n for b in blocks] == [2, 4, 4, 2]  # asks 1 batch, then 5 rows' worth
    assert_bit_equal(rows, list(ds))
    ragged = zd.Dataset.from_parquet(files, columns=["l", "i"]).map(
        lambda r: r["l"], vectorized=True
    )
    with make_iterator(ragged.unbatch()._node, IterContext()) as it:
        rows, _, blocks = by_blocks(it, 7)
    assert blocks
    assert [int(r) for r in rows] == [int(r) for x in lists for r in x]


def test_unbatch_of_scalars_fails_as_one_at_a_time():
    ds = zd.Dataset.range(4).unbatch()
    with pytest.raises(InvalidArgumentError, match="rank-0"):
        list(ds)
    with (
        make_iterator(ds._node, IterContext()) as it,
        pytest.raises(InvalidArgumentError, match="rank-0"),
    ):
        it.next_block(10)


def test_a_filter_that_keeps_nothing_of_a_block_reads_on():
    ds = zd.Dataset.range(100).filter(lambda x: x >= 95)
    with make_iterator(ds._node, IterContext()) as it:
        block = it.next_block(10)
        assert block.columns[0].tolist() == [95, 96, 97, 98, 99]


def test_a_batch_over_a_corrupt_file_goes_on_past_it_as_one_at_a_time(tmp_path):
    path = corrupt_file(tmp_path)  # rows 8 on fail
    ds = zd.Dataset.from_parquet(str(path), columns=["i", "f"])
    batches = ds.batch(3).ignore_errors()
    assert [b["i"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5]]
    write(path, table(0, 12))
    shorter = zd.Dataset.from_parquet(str(path), columns=["i"])
    write(path, table(0, 7))  # fewer rows than counted
    assert [b["i"].tolist() for b in shorter.batch(3).ignore_errors()] == [
        [0, 1, 2],
        [3, 4, 5],
    ]


# ---------------------------------------------------------------- map(vectorized)


def test_a_vectorized_map_runs_once_per_block_and_equals_the_elementwise_map():
    calls = []

    def fn(x):
        calls.append(len(x))
        return rows_of(x)

    ds = zd.Dataset.range(10)
    with make_iterator(ds.map(fn, vectorized=True)._node, IterContext()) as it:
        rows, _, _ = by_blocks(it, 4)
    assert calls == [4, 4, 2]
    expected = list(ds.map(rows_of))
    assert_bit_equal(rows, expected)
    assert_bit_equal(list(ds.map(rows_of, vectorized=True)), expected)
    parallel = ds.map(rows_of, num_parallel_calls=3, vectorized=True)
    assert_bit_equal(list(parallel), expected)
    with make_iterator(parallel._node, IterContext()) as it:
        rows, _, blocks = by_blocks(it, 4)
    assert blocks
    assert_bit_equal(rows, expected)


def test_tuples_are_unpacked_into_columns():
    ds = zd.Dataset.from_tensor_slices((np.arange(5), np.arange(5) * 10))
    out = ds.map(lambda a, b: a + b, vectorized=True)
    assert [int(x) for x in out] == [0, 11, 22, 33, 44]
    assert [int(x) for x in out.batch(5).unbatch()] == [0, 11, 22, 33, 44]


@pytest.mark.parametrize(
    ("fn", "lengths"),
    [
        (lambda x: x[:-1], r"\[3\] for 4"),
        (lambda x: (x, x.sum()), r"\[4, None\] for 4"),
    ],
    ids=["shorter", "scalar"],
)
def test_a_vectorized_fn_that_changes_the_row_count_is_named(fn, lengths):
    ds = zd.Dataset.range(8).map(fn, vectorized=True)
    with (
        make_iterator(ds._node, IterContext()) as it,
        pytest.raises(
            InvalidArgumentError, match=rf"map\(<lambda>\) \(vectorized\).* {lengths}"
        ),
    ):
        it.next_block(4)


def test_map_vectorized_must_be_a_bool():
    with pytest.raises(TypeError, match="vectorized"):
        zd.Dataset.range(3).map(double, vectorized="yes")
    plain = zd.Dataset.range(3).map(double)._node
    assert "vectorized" not in plain.args  # pipelines without it are unchanged


# ---------------------------------------------------------------- positions


@pytest.mark.parametrize(
    "pipeline", ["batch", "batch-drop", "filter-batch", "batch-unbatch", "map"]
)
def test_positions_save_and_restore_one_at_a_time(pipeline):
    ds = PIPELINES[pipeline](zd.Dataset.from_tensor_slices(TENSORS), True)
    assert_state_roundtrip(ds)


@pytest.mark.parametrize("pipeline", ["batch", "filter-batch", "batch-unbatch"])
@pytest.mark.parametrize("source", ["tensors", "parquet"])
def test_a_position_saved_between_blocks_resumes_there(
    files,  # noqa: F811
    source,
    pipeline,
):
    ds = PIPELINES[pipeline](sources(files)[source], True)
    expected = reference(sources(files)[source], PIPELINES[pipeline])
    for blocks_first in range(4):
        with make_iterator(ds._node, IterContext()) as it:
            head = []
            for _ in range(blocks_first):
                head += it.next_block(2).rows()
            state = it.get_state()
        with make_iterator(ds._node, IterContext()) as again:
            again.set_state(state)
            tail, _, _ = by_blocks(again, 3)
        assert_bit_equal(head + tail, expected)


def test_rows_held_past_a_block_are_saved_with_the_position():
    text = np.array(["a", "bb", "c", "d", "ee", "f", "gg", "h"])
    ds = zd.Dataset.from_tensor_slices(text).batch(2)
    with make_iterator(ds._node, IterContext()) as it:
        first = it.next_block(10)  # widths 2, 1, 2, 2: one batch, six rows held
        assert first.n == 1
        state = it.get_state()
        assert "held" in state
    with make_iterator(ds._node, IterContext()) as again:
        again.set_state(state)
        assert [b.tolist() for b in again] == [["c", "d"], ["ee", "f"], ["gg", "h"]]


# ---------------------------------------------------------------- lineage


@pytest.mark.parametrize("pipeline", list(PIPELINES))
@pytest.mark.parametrize("limit", [1, 3, 64])
def test_block_elements_stand_for_their_keys(pipeline, limit):
    ds = PIPELINES[pipeline](zd.Dataset.range(20), True)
    with make_iterator(ds._node, context(ds, SPLITS, lineage=True)) as it:
        rows, lineages, _ = by_blocks(it, limit)
    out = list(zip(rows, lineages, strict=True))
    claimed = check_invariant(out, SPLITS)
    handed = key_of(SPLITS)
    assert {handed[i] for row in rows for i in values(row)} <= claimed
    with make_iterator(ds._node, context(ds, SPLITS, lineage=True)) as it:
        one_by_one = [(e, it.lineage) for e in it]
    # the same, but for the keys a filter dropped at the end: its last block claims them
    assert check_invariant(one_by_one, SPLITS) <= claimed
