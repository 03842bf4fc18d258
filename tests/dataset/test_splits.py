"""Splits of sources, and pipelines run over a given sequence of splits."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip, ints
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops import OPS

SETTINGS = settings(max_examples=40, deadline=None, database=None)


def splits_of(source: zd.Dataset, max_split_size: int) -> list:
    node = source._node
    return OPS[node.op].splits(node, max_split_size)


def context(source: zd.Dataset, splits) -> IterContext:
    return IterContext(
        split_source=source._node, split_provider=ListSplitProvider(splits)
    )


def run_over(ds: zd.Dataset, source: zd.Dataset, splits) -> list:
    """The elements of ``ds`` when ``source`` reads only ``splits``."""
    with make_iterator(ds._node, context(source, splits)) as it:
        return list(it)


@pytest.fixture
def files(tmp_path):
    for name in ("c.dat", "a.dat", "b.dat", "d.dat"):
        (tmp_path / name).write_text(name)
    return tmp_path


# ---------------------------------------------------------------- listing splits


def test_range_splits_are_index_ranges():
    assert splits_of(zd.Dataset.range(10), 3) == [[0, 3], [3, 6], [6, 9], [9, 10]]
    assert splits_of(zd.Dataset.range(2, 20, 3), 4) == [[0, 4], [4, 6]]
    assert splits_of(zd.Dataset.range(5), 100) == [[0, 5]]
    assert splits_of(zd.Dataset.range(0), 3) == []


@SETTINGS
@given(n=st.integers(0, 60), size=st.integers(1, 16))
def test_splits_tile_the_source(n, size):
    splits = splits_of(zd.Dataset.range(n), size)
    indices = [i for lo, hi in splits for i in range(lo, hi)]
    assert indices == list(range(n))
    assert all(0 < hi - lo <= size for lo, hi in splits)


def test_from_tensor_slices_splits():
    source = zd.Dataset.from_tensor_slices({"a": np.arange(7), "b": np.ones((7, 2))})
    assert splits_of(source, 3) == [[0, 3], [3, 6], [6, 7]]


def test_list_files_splits_are_one_file_each_in_sorted_order(files):
    for shuffle in (False, True):
        source = zd.Dataset.list_files(str(files / "*.dat"), shuffle=shuffle, seed=1)
        assert splits_of(source, 1) == splits_of(source, 100)
        assert splits_of(source, 1) == [[0, 1], [1, 2], [2, 3], [3, 4]]
        paths = [str(files / n) for n in ("a.dat", "b.dat", "c.dat", "d.dat")]
        assert [OPS["list_files"].read(source._node, k) for k in range(4)] == paths


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_split_at_agrees_with_the_listing(files, size):
    sources = [
        zd.Dataset.range(3, 40, 4),
        zd.Dataset.from_tensor_slices(np.zeros((7, 2))),
        zd.Dataset.list_files(str(files / "*.dat")),
        zd.Dataset.range(0),
    ]
    for source in sources:
        op, node = OPS[source._node.op], source._node
        listed = op.splits(node, size)
        assert op.num_splits(node, size) == len(listed)
        assert [op.split_at(node, size, k) for k in range(len(listed))] == listed


def test_splittable_flags(files):
    assert OPS["range"].splittable
    assert OPS["from_tensor_slices"].splittable
    assert OPS["list_files"].splittable
    for op in ("from_tensors", "from_generator", "zip", "map", "repeat", "interleave"):
        assert not OPS[op].splittable, op


# ---------------------------------------------------------------- running over splits


@pytest.mark.parametrize("size", [1, 3, 4, 50])
def test_all_splits_reproduce_the_dataset(size):
    source = zd.Dataset.range(3, 40, 3)
    assert_bit_equal(run_over(source, source, splits_of(source, size)), list(source))
    ds = source.map(lambda x: x * 2).filter(lambda x: x % 4 == 0).batch(3)
    assert_bit_equal(run_over(ds, source, splits_of(source, size)), list(ds))


def test_all_splits_of_slices_reproduce_the_dataset():
    source = zd.Dataset.from_tensor_slices(
        (np.arange(10, dtype=np.int8), np.arange(20.0).reshape(10, 2))
    )
    assert_bit_equal(run_over(source, source, splits_of(source, 3)), list(source))


def test_subset_of_splits_gives_exactly_those_elements():
    source = zd.Dataset.range(100, 120)
    splits = splits_of(source, 4)  # [[0,4],[4,8],...]
    subset = [splits[3], splits[1]]
    expected = [100 + i for lo, hi in subset for i in range(lo, hi)]
    assert ints(run_over(source, source, subset)) == expected
    ds = source.map(lambda x: x - 100).enumerate()
    assert ints(run_over(ds, source, subset)) == list(
        enumerate(i - 100 for i in expected)
    )
    assert run_over(source, source, []) == []


def test_subset_of_slices_splits():
    data = {"x": np.arange(12, dtype=np.float32).reshape(6, 2), "y": np.arange(6)}
    source = zd.Dataset.from_tensor_slices(data)
    out = run_over(source, source, [[4, 6], [0, 1]])
    assert ints(out) == [
        {"x": [8.0, 9.0], "y": 4},
        {"x": [10.0, 11.0], "y": 5},
        {"x": [0.0, 1.0], "y": 0},
    ]


def test_list_files_runs_over_file_splits(files):
    source = zd.Dataset.list_files(str(files / "*.dat"), seed=3)
    chosen = [[3, 4], [0, 1]]
    assert run_over(source, source, chosen) == [
        str(files / n) for n in ("d.dat", "a.dat")
    ]
    read = source.map(lambda path: pathlib.Path(path).read_text())
    assert run_over(read, source, chosen) == ["d.dat", "a.dat"]
    assert run_over(read, source, [[1, 3]]) == ["b.dat", "c.dat"]
    every = splits_of(source, 1)
    assert run_over(source, source, every) == sorted(source)


def test_repeat_above_the_source_rereads_the_splits():
    source = zd.Dataset.range(10)
    subset = [[2, 4], [7, 8]]
    assert ints(run_over(source.repeat(3), source, subset)) == [2, 3, 7] * 3
    ds = source.map(lambda x: x * 10).repeat(2).batch(2)
    assert [b.tolist() for b in run_over(ds, source, subset)] == [
        [20, 30],
        [70, 20],
        [30, 70],
    ]


def test_repeat_forever_above_the_source():
    source = zd.Dataset.range(10)
    ds = source.repeat().take(7)
    assert ints(run_over(ds, source, [[5, 7]])) == [5, 6, 5, 6, 5, 6, 5]
    assert run_over(source.repeat(), source, []) == []


def test_split_source_is_only_the_given_node():
    source, other = zd.Dataset.range(10), zd.Dataset.range(10)
    ds = zd.Dataset.zip((source, other))
    assert ints(run_over(ds, source, [[6, 9]])) == [(6, 0), (7, 1), (8, 2)]


def test_checkpoint_over_splits():
    source = zd.Dataset.range(20)
    ds = source.shuffle(3, seed=1).repeat(2).batch(2)
    splits = [[3, 6], [10, 12], [18, 20]]
    out = assert_state_roundtrip(
        lambda: make_iterator(ds._node, context(source, splits))
    )
    assert sorted(x for b in out for x in b.tolist()) == sorted(
        [3, 4, 5, 10, 11, 18, 19] * 2
    )


def test_checkpoint_over_file_splits(files):
    source = zd.Dataset.list_files(str(files / "*.dat"))
    splits = splits_of(source, 1)[1:]
    out = assert_state_roundtrip(
        lambda: make_iterator(source.repeat(2)._node, context(source, splits))
    )
    assert out == [str(files / n) for n in ("b.dat", "c.dat", "d.dat")] * 2


# ---------------------------------------------------------------- shard


def test_local_shards_of_files_cover_every_file_once(files):
    source = zd.Dataset.list_files(str(files / "*.dat"), shuffle=False)
    shards = [list(source.shard(3, i)) for i in range(3)]
    assert [len(s) for s in shards] == [2, 1, 1]
    assert sorted(p for s in shards for p in s) == list(source)


def test_local_shards_after_splits():
    source = zd.Dataset.range(12)
    out = run_over(source.shard(2, 1), source, [[0, 3], [8, 12]])
    assert ints(out) == [1, 8, 10]


@SETTINGS
@given(
    n=st.integers(0, 60),
    split_size=st.integers(1, 16),
    batch=st.integers(1, 20),
    drop_remainder=st.booleans(),
    skip=st.lists(st.booleans(), max_size=10),
)
def test_batch_of_range_read_in_bulk_across_splits(
    n, split_size, batch, drop_remainder, skip
):
    """``range`` hands ``batch`` whole columns; batches span split boundaries
    and equal the element-by-element result, over any subset of the splits."""
    source = zd.Dataset.range(3, 3 + 2 * n, 2)
    every = splits_of(source, split_size)
    splits = [s for k, s in enumerate(every) if not (k < len(skip) and skip[k])]
    values = [3 + 2 * i for lo, hi in splits for i in range(lo, hi)]
    ds = source.batch(batch, drop_remainder=drop_remainder)
    got = run_over(ds, source, splits)
    want = [values[i : i + batch] for i in range(0, len(values), batch)]
    if drop_remainder and want and len(want[-1]) < batch:
        want.pop()
    assert [b.tolist() for b in got] == want
    assert all(b.dtype == np.int64 for b in got)
    assert_state_roundtrip(lambda: make_iterator(ds._node, context(source, splits)))
