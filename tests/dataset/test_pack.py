"""``pack``: sequences packed first-fit into rows with segment ids and positions."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.dataset.test_lineage import SPLITS, check_invariant, claimed, drive
from tests.dataset.test_padded_batch import assert_save_restore
from zmqdata._dataset import graph
from zmqdata.errors import InvalidArgumentError

SETTINGS = settings(max_examples=80, deadline=None, database=None)


def of_lengths(lengths, dtype=np.int32):
    """Sequence ``i`` holds ``lengths[i]`` consecutive tokens, all distinct."""
    starts = np.cumsum([0, *lengths[:-1]]) if lengths else []
    return [
        np.arange(s, s + n, dtype=dtype) for s, n in zip(starts, lengths, strict=True)
    ]


def from_list(sequences):
    return zd.Dataset.from_generator(lambda: iter(sequences))


def unpack(row):
    """The sequences of a packed row, in the row's order (checking its layout)."""
    ids, positions = row["segment_ids"], row["positions"]
    used = int(np.count_nonzero(ids))
    assert (ids[used:] == 0).all()  # padding last
    assert (positions[used:] == 0).all()
    out = []
    for segment in range(1, int(ids.max(initial=0)) + 1):
        where = np.flatnonzero(ids == segment)
        assert len(where)
        assert (np.diff(where) == 1).all(), "segments are contiguous"
        assert positions[where].tolist() == list(range(len(where)))
        out.append({k: v[where] for k, v in row.items() if k not in RESERVED})
    assert sum(len(s[next(iter(s))]) for s in out) == used
    return out


RESERVED = ("segment_ids", "positions")


def i32(values):
    return np.array(values, np.int32)


# ---------------------------------------------------------------- layout


def test_rows_hold_tokens_segment_ids_and_positions():
    rows = list(from_list(of_lengths([3, 2, 4, 2])).pack(5))
    assert_bit_equal(
        rows,
        [
            {
                "tokens": i32([0, 1, 2, 3, 4]),
                "segment_ids": i32([1, 1, 1, 2, 2]),
                "positions": i32([0, 1, 2, 0, 1]),
            },
            {
                "tokens": i32([5, 6, 7, 8, 0]),
                "segment_ids": i32([1, 1, 1, 1, 0]),
                "positions": i32([0, 1, 2, 3, 0]),
            },
            {
                "tokens": i32([9, 10, 0, 0, 0]),
                "segment_ids": i32([1, 1, 0, 0, 0]),
                "positions": i32([0, 1, 0, 0, 0]),
            },
        ],
    )


def test_first_fit_fills_earlier_rows_with_later_sequences():
    # 4 opens row A, 3 does not fit A: row B; 1 fills A (4 + 1), 2 fills B.
    rows = list(from_list(of_lengths([4, 3, 1, 2])).pack(5))
    assert [row["tokens"].tolist() for row in rows] == [
        [0, 1, 2, 3, 7],
        [4, 5, 6, 8, 9],
    ]
    assert rows[0]["segment_ids"].tolist() == [1, 1, 1, 1, 2]


def test_the_fullest_row_goes_out_when_too_many_are_open():
    # One open row: sequences go in order, a row out whenever the next does not fit.
    lengths = [2, 4, 1, 3, 3]
    one = list(from_list(of_lengths(lengths)).pack(5, num_open_rows=1))
    assert [len(unpack(row)) for row in one] == [1, 2, 1, 1]
    # Two open rows: 2 -> A, 4 -> B, 3 fills A, 1 fills B.
    two = list(from_list(of_lengths([2, 4, 3, 1])).pack(5, num_open_rows=2))
    assert [row["tokens"].tolist() for row in two] == [
        [0, 1, 6, 7, 8],
        [2, 3, 4, 5, 9],
    ]
    # 3 -> A, 4 -> B, 3 fits neither: B (4 used, the fullest) goes out, C opens.
    three = list(from_list(of_lengths([3, 4, 3])).pack(5, num_open_rows=2))
    assert [row["tokens"].tolist() for row in three] == [
        [3, 4, 5, 6, 0],
        [0, 1, 2, 0, 0],
        [7, 8, 9, 0, 0],
    ]


def test_dicts_of_equal_length_arrays_pack_together():
    elements = [
        {"tokens": i32([5, 6, 7]), "loss_mask": np.array([0, 1, 1], np.uint8)},
        {"tokens": i32([8]), "loss_mask": np.array([1], np.uint8)},
    ]
    [row] = list(
        from_list(elements).pack(6, padding_values={"tokens": -1, "loss_mask": None})
    )
    assert_bit_equal(
        row,
        {
            "tokens": i32([5, 6, 7, 8, -1, -1]),
            "loss_mask": np.array([0, 1, 1, 1, 0, 0], np.uint8),
            "segment_ids": i32([1, 1, 1, 2, 0, 0]),
            "positions": i32([0, 1, 2, 0, 0, 0]),
        },
    )


def test_empty_sequences_make_no_segment():
    rows = list(from_list(of_lengths([0, 2, 0, 3, 0])).pack(5))
    assert [row["segment_ids"].tolist() for row in rows] == [[1, 1, 2, 2, 2]]
    assert list(from_list(of_lengths([0, 0])).pack(5)) == []


def test_rows_batch_into_fixed_shapes():
    ds = (
        from_list(of_lengths([3, 1, 4, 1, 5, 2, 6]))
        .pack(8)
        .batch(2, drop_remainder=True)
    )
    batches = list(ds)
    assert all(b["tokens"].shape == (2, 8) for b in batches)
    assert ds.element_spec is None  # from_generator: unknown
    sliced = zd.Dataset.from_tensor_slices(np.zeros((6, 3), np.int64))
    assert sliced.pack(8).batch(2, drop_remainder=True).element_spec == {
        "tokens": zd.TensorSpec((2, 8), np.dtype(np.int64)),
        "segment_ids": zd.TensorSpec((2, 8), np.dtype(np.int32)),
        "positions": zd.TensorSpec((2, 8), np.dtype(np.int32)),
    }


def test_cardinality_and_serialization():
    sliced = zd.Dataset.from_tensor_slices(np.zeros((6, 3), np.int64))
    assert sliced.pack(8).cardinality() == zd.UNKNOWN_CARDINALITY
    assert sliced.repeat().pack(8).cardinality() == zd.INFINITE_CARDINALITY
    assert sliced.take(0).pack(8).cardinality() == 0
    ds = from_list(of_lengths([3, 1, 4, 1, 5])).pack(
        6, num_open_rows=2, padding_values=-9
    )
    copy = zd.Dataset(graph.deserialize(graph.serialize(ds._node)))
    assert_bit_equal(list(copy), list(ds))


# ---------------------------------------------------------------- round trips


@st.composite
def packings(draw):
    length = draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(0, length), max_size=40))
    return length, lengths, draw(st.integers(1, 4))


@SETTINGS
@given(case=packings())
def test_unpacking_gives_back_every_token_in_order(case):
    length, lengths, open_rows = case
    sequences = of_lengths(lengths)
    rows = list(from_list(sequences).pack(length, num_open_rows=open_rows))
    unpacked = [s["tokens"] for row in rows for s in unpack(row)]
    assert all(row["tokens"].shape == (length,) for row in rows)
    # Every non-empty sequence exactly once, whole (tokens are distinct).
    assert sorted(s.tolist() for s in unpacked) == sorted(
        s.tolist() for s in sequences if len(s)
    )
    # A row goes out before it is full only when a sequence does not fit in
    # it: at most twice the rows of a perfect packing.
    assert len(rows) <= 2 * -(-sum(lengths) // length)


@SETTINGS
@given(case=packings(), step=st.integers(0, 40))
def test_save_at_a_random_step_and_restore(case, step):
    length, lengths, open_rows = case
    ds = from_list(of_lengths(lengths)).pack(length, num_open_rows=open_rows)
    assert_save_restore(ds, step)


@pytest.mark.parametrize(
    "ds",
    [
        from_list(of_lengths([3, 2, 4, 2, 0, 5])).pack(5),
        from_list(of_lengths([1, 4, 2, 3, 3, 1, 5])).pack(5, num_open_rows=2).batch(2),
        zd.Dataset.range(12).map(lambda x: np.arange(x % 5)).pack(6, num_open_rows=3),
    ],
)
def test_state_roundtrip(ds):
    assert_state_roundtrip(ds)


def test_packing_fills_rows_with_a_few_open():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 513, size=2000).tolist()
    rows = list(from_list(of_lengths(lengths)).pack(2048))
    efficiency = zd.packing_efficiency(next(iter(from_list(rows).batch(len(rows)))))
    # 2000 sequences of 256 tokens on average in 2048-token rows: about 1%
    # padding, where padding each sequence to 512 wastes half.
    assert efficiency > 0.98
    assert sum(lengths) / (len(rows) * 2048) == pytest.approx(efficiency)


def test_packing_efficiency_of_rows_batches_and_segment_ids():
    row = {"segment_ids": i32([1, 1, 2, 0])}
    assert zd.packing_efficiency(row) == 0.75
    assert zd.packing_efficiency(i32([[1, 0], [1, 1]])) == 0.75
    with pytest.raises(ValueError, match="segment_ids"):
        zd.packing_efficiency(np.zeros(0, np.int32))
    with pytest.raises(ValueError, match="segment_ids"):
        zd.packing_efficiency({"segment_ids": np.ones(2, np.float32)})


# ---------------------------------------------------------------- bad input

DS = from_list(of_lengths([3, 2]))

BAD = {
    "length 0": (lambda: DS.pack(0), ValueError, "pack length must be >= 1, got 0"),
    "length -4": (lambda: DS.pack(-4), ValueError, "pack length must be >= 1, got -4"),
    "length str": (
        lambda: DS.pack("8"),
        TypeError,
        "pack length must be an int, got '8'",
    ),
    "open rows 0": (
        lambda: DS.pack(8, num_open_rows=0),
        ValueError,
        "pack num_open_rows must be >= 1, got 0",
    ),
    "padding array": (
        lambda: DS.pack(8, padding_values=np.zeros(3)),
        TypeError,
        "padding_values must be scalars",
    ),
    "2-D elements": (
        lambda: zd.Dataset.from_tensor_slices(np.zeros((2, 3, 4))).pack(8),
        ValueError,
        (
            "pack takes 1-D arrays or dicts of 1-D arrays, got elements of spec "
            "TensorSpec(shape=(3, 4), dtype=float64)"
        ),
    ),
    "reserved key": (
        lambda: zd.Dataset.from_tensor_slices({"positions": np.zeros((2, 3))}).pack(8),
        ValueError,
        "pack adds 'positions' to its rows",
    ),
    "padding dtype": (
        lambda: zd.Dataset.from_tensor_slices(np.zeros((2, 3), np.int8)).pack(
            8, padding_values=-0.5
        ),
        ValueError,
        "padding value -0.5 does not fit component 'tokens' of dtype int8",
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_value(name):
    call, error, message = BAD[name]
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize(
    ("elements", "message"),
    [
        (
            of_lengths([3, 9, 2]),
            "an element of length 9 is longer than the rows (length=8)",
        ),
        ([np.zeros((2, 2))], "got ndarray of shape (2, 2)"),
        ([[1, 2]], "got list"),
        ([{"a": np.zeros(2), "b": np.zeros(3)}], "different lengths {'a': 2, 'b': 3}"),
        ([{"tokens": np.zeros(2), "segment_ids": np.zeros(2)}], "adds 'segment_ids'"),
        ([{"a": np.zeros(2)}, {"b": np.zeros(2)}], "different keys: ['a'] and ['b']"),
    ],
)
def test_bad_elements_raise_at_run_time_naming_the_value(elements, message):
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        list(from_list(elements).pack(8))


# ---------------------------------------------------------------- lineage


def tokens_of(out):
    """``(tokens, lineage)`` pairs of packed rows, padding as -1."""
    return [
        (np.where(row["segment_ids"] > 0, row["tokens"], -1), lin) for row, lin in out
    ]


def test_a_row_claims_the_keys_of_its_sequences():
    source = zd.Dataset.range(20)
    ds = source.map(lambda x: np.full(int(x) % 4, x)).pack(5, num_open_rows=2)
    out = tokens_of(drive(ds, source))
    held = [sorted({int(v) for v in tokens if v >= 0}) for tokens, _ in out]
    for indices, holds in zip(claimed(out), held, strict=True):
        assert set(holds) <= set(indices)  # and the empty sequences read with it
    everything = {base + i for lo, hi, base in SPLITS for i in range(lo, hi)}
    assert check_invariant(out, SPLITS) == everything


@pytest.mark.parametrize("seed", range(4))
def test_below_an_op_that_expands_a_row_claims_in_read_order(seed):
    source = zd.Dataset.range(20)
    ds = (
        source.shuffle(20, seed=seed)
        .batch(3)
        .unbatch()
        .map(lambda x: np.full(int(x) % 3 + 1, x))
        .pack(4, num_open_rows=2)
    )
    out = tokens_of(drive(ds, source))
    everything = {base + i for lo, hi, base in SPLITS for i in range(lo, hi)}
    assert check_invariant(out, SPLITS) == everything


@pytest.mark.parametrize(
    ("carry", "last"),
    [
        (lambda ds: ds, {419}),  # 19 fails: nothing comes after it to claim it
        (lambda ds: ds.batch(3).unbatch(), {418, 419}),  # 19 stands for [18, 19]
    ],
)
def test_a_sequence_too_long_for_ignore_errors_is_claimed_with_the_next_row(
    carry, last
):
    source = zd.Dataset.range(20)
    ds = carry(source).map(lambda x: np.full(int(x) % 5, x)).pack(3).ignore_errors()
    out = tokens_of(drive(ds, source))
    assert sorted(v for tokens, _ in out for v in tokens if v >= 0) == sorted(
        v for x in range(20) if x % 5 <= 3 for v in [x] * (x % 5)
    )
    everything = {base + i for lo, hi, base in SPLITS for i in range(lo, hi)}
    assert check_invariant(out, SPLITS) == everything - last
