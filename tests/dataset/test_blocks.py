"""``next_block``: sources that read in bulk hand out blocks equal to their elements.

And the frames a block encodes to (``frames.encode_block``) decode to the same
elements as ``frames.encode`` of them.
"""

from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal
from tests.dataset.test_parquet import (  # noqa: F401 (files: a fixture)
    SIZES,
    files,
    one_group,
    opens,
    table,
    write,
)
from zmqdata import errors
from zmqdata._dataset.block import Block
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._wire import frames


def blocks_of(
    ds: zd.Dataset, splits: list[list[int]], limit: int
) -> list[Block] | None:
    """The blocks of ``ds`` when its source reads ``splits`` (None: it cannot)."""
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider(splits))
    out = []
    with make_iterator(ds._node, ctx) as it:
        while (block := it.next_block(limit)) is not None and block.n:
            out.append(block)
    if block is None:
        assert not out, "a source that made a block makes them all"
        return None
    return out


def assert_same_elements(ds: zd.Dataset, splits: list[list[int]], limit: int) -> None:
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider(splits))
    with make_iterator(ds._node, ctx) as it:
        expected = list(it)
    blocks = blocks_of(ds, splits, limit)
    assert blocks is not None
    assert all(0 < block.n <= limit for block in blocks)
    rows = [row for block in blocks for row in block.rows()]
    assert_bit_equal(rows, expected)
    for block in blocks:  # the wire's columnar form of a block decodes to its rows
        encoded = frames.encode_block(block.first, block.columns, block.n)
        assert encoded is not None
        assert_bit_equal(frames.decode(encoded)[0], block.rows())


TENSORS = {
    "x": np.arange(30, dtype=np.float32).reshape(10, 3),
    "y": (np.arange(10, dtype=">i2"), np.array([f"s{i}" for i in range(10)])),
}


@pytest.mark.parametrize(
    "ds",
    [zd.Dataset.range(3, 40, 3), zd.Dataset.from_tensor_slices(TENSORS)],
    ids=["range", "from_tensor_slices"],
)
def test_sources_in_bulk_hand_out_blocks_of_their_elements(ds):
    assert_same_elements(ds, [[0, 4], [4, 10]], limit=3)


def test_parquet_rows_come_in_blocks_within_files_and_splits(files):  # noqa: F811
    ds = zd.Dataset.from_parquet(files)
    assert_same_elements(ds, [[0, 9], [9, 14], [17, 22]], limit=4)
    blocks = blocks_of(ds, [[0, 9]], 9)
    assert blocks is not None
    ragged = [b for b in blocks if b.columns[4].dtype == object]
    assert ragged, "the list column of unequal lengths travels as one ragged column"


def test_parquet_of_equal_lists_and_structs(tmp_path):
    path = tmp_path / "s.parquet"
    data = pa.table(
        {"l": pa.array([[1, 2]] * 5, pa.list_(pa.int64())), "i": pa.array(range(5))}
    )
    write(path, data)
    assert_same_elements(zd.Dataset.from_parquet(str(path)), [[0, 5]], limit=2)
    struct = pa.table({"s": pa.array([{"a": 1}] * 3)})
    write(tmp_path / "t.parquet", struct)
    ds = zd.Dataset.from_parquet(str(tmp_path / "t.parquet"))
    assert blocks_of(ds, [[0, 3]], 2) is None  # structs: one element at a time


def test_a_block_cuts_and_parts_keep_their_elements():
    block = Block.of({"a": 0, "b": ""}, [np.arange(5), list("vwxyz")])
    head, rest = block.cut(2)
    assert head.rows() + rest.rows() == block.rows()
    assert block.part(1, 4).rows() == block.rows()[1:4]


@pytest.mark.parametrize(
    ("lengths", "refused"),
    [([3, -1], "bad ragged lengths"), ([3, 5], "holds 32 bytes but 8")],
    ids=["negative", "past-the-values"],
)
def test_a_forged_ragged_column_is_refused(lengths, refused):
    column = np.empty(2, dtype=object)
    column[0], column[1] = np.arange(3), np.arange(1)
    encoded = frames.encode_block(np.arange(3), [column], 2)
    assert encoded is not None
    assert_bit_equal(frames.decode(encoded)[0], [np.arange(3), np.arange(1)])
    header = msgpack.unpackb(encoded[0])
    header["c"][3] = np.array(lengths, "<i8").tobytes()
    with pytest.raises(errors.InvalidArgumentError, match=refused):
        frames.decode([msgpack.packb(header), *encoded[1:]])


def test_splits_taken_apart_within_one_read_open_the_file_once(tmp_path, monkeypatch):
    opened = opens(monkeypatch, "record_blocks")
    ds = zd.Dataset.from_parquet(one_group(tmp_path))
    blocks = blocks_of(ds, [[0, 3], [6, 9], [12, 15], [2, 4]], limit=8)
    assert blocks is not None
    assert [int(row["i"]) for b in blocks for row in b.rows()] == [
        0, 1, 2, 6, 7, 8, 12, 13, 14, 2, 3
    ]  # fmt: skip
    assert opened == [0]  # the split behind the last block is in it: no reread
