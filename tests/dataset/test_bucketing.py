"""``bucket_by_sequence_length``: tf.data's documented examples, a model, errors, state."""

from __future__ import annotations

import bisect
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.dataset.test_lineage import SPLITS, check_invariant, claimed, drive, values
from tests.dataset.test_padded_batch import assert_save_restore
from zmqdata._dataset import graph
from zmqdata.errors import InvalidArgumentError

SETTINGS = settings(max_examples=60, deadline=None, database=None)

# The elements of tf.data's bucket_by_sequence_length examples.
ELEMENTS = [[0], [1, 2, 3, 4], [5, 6, 7], [7, 8, 9, 10, 11], [13, 14, 15, 16, 19, 20],
            [21, 22]]  # fmt: skip


def tf_elements(dtype):
    return zd.Dataset.from_generator(lambda: (np.array(e, dtype) for e in ELEMENTS))


def length(element):
    return len(element)


# ---------------------------------------------------------------- tf.data's examples


def test_three_buckets_of_batch_size_two():
    ds = tf_elements(np.int64).bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=[3, 5],
        bucket_batch_sizes=[2, 2, 2],
    )
    i64 = np.int64
    assert_bit_equal(
        list(ds),
        [
            np.array([[1, 2, 3, 4], [5, 6, 7, 0]], i64),
            np.array([[7, 8, 9, 10, 11, 0], [13, 14, 15, 16, 19, 20]], i64),
            np.array([[0, 0], [21, 22]], i64),
        ],
    )


def test_pad_to_bucket_boundary_with_a_padding_value():
    ds = tf_elements(np.int32).bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=[4, 7],
        bucket_batch_sizes=[2, 2, 2],
        pad_to_bucket_boundary=True,
        padding_values=-1,
    )
    i32 = np.int32
    assert_bit_equal(
        list(ds),
        [
            np.array([[0, -1, -1], [5, 6, 7]], i32),
            np.array([[1, 2, 3, 4, -1, -1], [7, 8, 9, 10, 11, -1]], i32),
            np.array([[21, 22, -1]], i32),
            np.array([[13, 14, 15, 16, 19, 20]], i32),
        ],
    )


def test_drop_remainder_drops_the_partial_buckets():
    ds = tf_elements(np.int32).bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=[4, 7],
        bucket_batch_sizes=[2, 2, 2],
        pad_to_bucket_boundary=True,
        padding_values=-1,
        drop_remainder=True,
    )
    i32 = np.int32
    assert_bit_equal(
        list(ds),
        [
            np.array([[0, -1, -1], [5, 6, 7]], i32),
            np.array([[1, 2, 3, 4, -1, -1], [7, 8, 9, 10, 11, -1]], i32),
        ],
    )


# ---------------------------------------------------------------- a model of tf.data's


def model(lengths, boundaries, sizes, drop_remainder):
    """The batches (lists of lengths) tf.data's group_by_window makes."""
    buckets = [[] for _ in sizes]
    out = []
    for n in lengths:
        bucket = bisect.bisect_right(boundaries, n)
        buckets[bucket].append(n)
        if len(buckets[bucket]) == sizes[bucket]:
            out.append(buckets[bucket])
            buckets[bucket] = []
    if not drop_remainder:
        out += [held for held in buckets if held]
    return out


@st.composite
def bucketings(draw):
    lengths = draw(st.lists(st.integers(0, 12), max_size=30))
    boundaries = sorted(draw(st.sets(st.integers(1, 12), max_size=3)))
    sizes = draw(
        st.lists(
            st.integers(1, 4),
            min_size=len(boundaries) + 1,
            max_size=len(boundaries) + 1,
        )
    )
    return lengths, boundaries, sizes, draw(st.booleans())


def sequences(lengths):
    """Element ``i`` is ``[i, i, ...]`` (length ``lengths[i]``), as int16."""
    return (
        zd.Dataset.from_tensor_slices(np.array(lengths, np.int64))
        .enumerate()
        .map(lambda i, n: np.full(n, i, np.int16))
    )


@SETTINGS
@given(case=bucketings())
def test_batches_are_the_ones_tf_data_makes(case):
    lengths, boundaries, sizes, drop = case
    ds = sequences(lengths).bucket_by_sequence_length(
        length, boundaries, sizes, padding_values=-1, drop_remainder=drop
    )
    out = list(ds)
    batches = [[int((row >= 0).sum()) for row in batch] for batch in out]
    assert batches == model(lengths, boundaries, sizes, drop)
    for batch in out:
        assert batch.dtype == np.int16
        assert batch.shape[1] == max([0, *(int((row >= 0).sum()) for row in batch)])
        for row in batch:
            i = int(row[0]) if len(row) and row[0] >= 0 else None
            if i is not None:
                assert row.tolist() == [i] * lengths[i] + [-1] * (len(row) - lengths[i])


@SETTINGS
@given(case=bucketings(), step=st.integers(0, 30), boundary=st.booleans())
def test_save_at_a_random_step_and_restore(case, step, boundary):
    lengths, boundaries, sizes, drop = case
    if boundary:  # every length below the last boundary
        boundaries = [*boundaries, 13]
        sizes = [*sizes, 1]
    ds = sequences(lengths).bucket_by_sequence_length(
        length, boundaries, sizes, pad_to_bucket_boundary=boundary, drop_remainder=drop
    )
    assert_save_restore(ds, step)


# ---------------------------------------------------------------- structures, specs


def test_padded_shapes_and_no_padding():
    rows = [np.ones((n, 2), np.float32) * n for n in (1, 2, 5, 1)]
    ds = zd.Dataset.from_generator(lambda: iter(rows))
    fixed = ds.bucket_by_sequence_length(length, [3], [2, 2], padded_shapes=[8, None])
    assert [b.shape for b in fixed] == [(2, 8, 2), (1, 8, 2), (1, 8, 2)]
    same = zd.Dataset.from_generator(lambda: iter([np.ones(2)] * 3))
    plain = same.bucket_by_sequence_length(length, [3], [2, 2], no_padding=True)
    assert_bit_equal(list(plain), [np.ones((2, 2)), np.ones((1, 2))])


def test_pad_to_bucket_boundary_pads_axis_0_where_the_spec_is_unknown():
    rows = [np.ones((n, 2), np.float32) for n in (1, 4, 2)]
    ds = zd.Dataset.from_generator(lambda: iter(rows)).bucket_by_sequence_length(
        length, [3, 6], [2, 2, 2], pad_to_bucket_boundary=True
    )
    assert [b.shape for b in ds] == [(2, 2, 2), (1, 5, 2)]


def test_pad_to_bucket_boundary_pads_the_unknown_sizes_of_the_spec():
    words = zd.Dataset.from_tensor_slices((np.arange(5), np.ones((5, 3), np.int8)))
    ds = words.bucket_by_sequence_length(
        lambda i, x: i, [2, 4], [2, 2, 2], pad_to_bucket_boundary=True
    )
    assert ds.element_spec == (
        zd.TensorSpec((None,), np.dtype(np.int64)),
        zd.TensorSpec((None, 3), np.dtype(np.int8)),
    )
    with iter(ds) as it:
        assert [next(it)[1].shape for _ in range(2)] == [(2, 3), (2, 3)]  # stays 3
        with pytest.raises(InvalidArgumentError, match="length 4 is not below"):
            next(it)


def test_a_tuple_element_is_unpacked_for_the_length_function():
    pairs = zd.Dataset.from_generator(
        lambda: iter([(np.arange(3), 3), (np.arange(1), 1)])
    )
    ds = pairs.bucket_by_sequence_length(lambda seq, n: n, [2], [1, 1])
    assert [b[1].tolist() for b in ds] == [[3], [1]]


def test_cardinality_spec_and_serialization():
    slices = zd.Dataset.from_tensor_slices(np.zeros((4, 3), np.int32))
    ds = slices.bucket_by_sequence_length(length, [2], [2, 2])
    assert ds.cardinality() == zd.UNKNOWN_CARDINALITY
    assert ds.element_spec == zd.TensorSpec((None, 3), np.dtype(np.int32))
    assert (
        zd.Dataset.range(0).bucket_by_sequence_length(int, [1], [1, 1]).cardinality()
        == 0
    )
    forever = slices.repeat().bucket_by_sequence_length(length, [2], [2, 2])
    assert forever.cardinality() == zd.INFINITE_CARDINALITY
    nested = tf_elements(np.int64).bucket_by_sequence_length(
        lambda x: len(x), [3, 5], [2, 2, 2], padding_values=np.int64(-3)
    )
    copy = zd.Dataset(graph.deserialize(graph.serialize(nested._node)))
    assert_bit_equal(list(copy), list(nested))


# ---------------------------------------------------------------- bad input

DS = tf_elements(np.int64)

BAD = {
    "mismatched lengths": (
        lambda: DS.bucket_by_sequence_length(length, [3, 5], [2, 2]),
        ValueError,
        (
            "len(bucket_batch_sizes) must be len(bucket_boundaries) + 1, got 2 batch "
            "sizes [2, 2] for 2 boundaries [3, 5]"
        ),
    ),
    "not increasing": (
        lambda: DS.bucket_by_sequence_length(length, [5, 3], [2, 2, 2]),
        ValueError,
        "bucket_boundaries must be strictly increasing, got [5, 3]",
    ),
    "equal boundaries": (
        lambda: DS.bucket_by_sequence_length(length, [3, 3], [2, 2, 2]),
        ValueError,
        "strictly increasing, got [3, 3]",
    ),
    "boundary 0": (
        lambda: DS.bucket_by_sequence_length(length, [0], [2, 2]),
        ValueError,
        "bucket_boundaries[0] must be >= 1, got 0",
    ),
    "batch size 0": (
        lambda: DS.bucket_by_sequence_length(length, [3], [2, 0]),
        ValueError,
        "bucket_batch_sizes[1] must be >= 1, got 0",
    ),
    "negative batch size": (
        lambda: DS.bucket_by_sequence_length(length, [3], [-1, 2]),
        ValueError,
        "bucket_batch_sizes[0] must be >= 1, got -1",
    ),
    "boundaries not a list": (
        lambda: DS.bucket_by_sequence_length(length, 3, [2, 2]),
        TypeError,
        "bucket_boundaries must be a list of ints, got 3",
    ),
    "boundary float": (
        lambda: DS.bucket_by_sequence_length(length, [2.5], [2, 2]),
        TypeError,
        "bucket_boundaries[0] must be an int, got 2.5",
    ),
    "no boundary to pad to": (
        lambda: DS.bucket_by_sequence_length(
            length, [], [2], pad_to_bucket_boundary=True
        ),
        ValueError,
        "pad_to_bucket_boundary=True needs bucket_boundaries, got []",
    ),
    "length func": (
        lambda: DS.bucket_by_sequence_length(3, [3], [2, 2]),
        TypeError,
        "element_length_func must be callable, got 3",
    ),
    "flag": (
        lambda: DS.bucket_by_sequence_length(length, [3], [2, 2], no_padding="yes"),
        TypeError,
        "no_padding must be a bool, got 'yes'",
    ),
    "padded shape too small for the spec": (
        lambda: zd.Dataset.from_tensor_slices(
            np.zeros((4, 3))
        ).bucket_by_sequence_length(length, [3], [2, 2], padded_shapes=[2]),
        ValueError,
        "padded shape [2] of component 0 is smaller than its elements' shape (3,)",
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_value(name):
    call, error, message = BAD[name]
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_an_element_at_the_last_boundary_raises_with_pad_to_bucket_boundary():
    ds = DS.bucket_by_sequence_length(
        length, [3, 6], [9, 9, 9], pad_to_bucket_boundary=True
    )
    with pytest.raises(InvalidArgumentError, match=re.escape(
        "an element of length 6 is not below the last bucket boundary 6"
    )):  # fmt: skip
        list(ds)


def test_a_length_that_is_not_an_int_names_it():
    ds = DS.bucket_by_sequence_length(lambda x: 2.5, [3], [2, 2])
    with pytest.raises(TypeError, match=r"integer scalar, got 2\.5"):
        list(ds)


def test_a_padded_shape_too_small_at_run_time_names_the_size():
    ds = DS.bucket_by_sequence_length(length, [3], [2, 2], padded_shapes=[5])
    with pytest.raises(InvalidArgumentError, match="size 6 in dimension 0"):
        list(ds)


# ---------------------------------------------------------------- state, lineage


@pytest.mark.parametrize(
    "ds",
    [
        DS.bucket_by_sequence_length(length, [3, 5], [2, 2, 2]),
        DS.bucket_by_sequence_length(length, [4, 7], [3, 1, 2], drop_remainder=True),
        DS.repeat(3).bucket_by_sequence_length(
            length, [3], [2, 4], pad_to_bucket_boundary=False, no_padding=False
        ),
    ],
)
def test_state_roundtrip(ds):
    assert_state_roundtrip(ds)


def spread(x):
    """Source index ``x`` as a sequence of ``x % 4 + 1`` copies of it."""
    return np.full(int(x) % 4 + 1, x)


def test_a_bucket_s_batch_claims_its_elements_keys():
    source = zd.Dataset.range(20)
    ds = source.map(spread).bucket_by_sequence_length(
        length, [2, 4], [2, 3, 2], padding_values=-1
    )
    out = drive(ds, source)
    assert claimed(out) == [sorted({v for v in values(b) if v >= 0}) for b, _ in out]
    assert check_invariant(out, SPLITS) == {
        base + i for lo, hi, base in SPLITS for i in range(lo, hi)
    }


def test_dropped_partial_buckets_are_claimed_by_nothing():
    source = zd.Dataset.range(20)
    ds = source.map(spread).bucket_by_sequence_length(
        length, [2, 4], [3, 3, 3], padding_values=-1, drop_remainder=True
    )
    out = drive(ds, source)
    assert claimed(out) == [sorted({v for v in values(b) if v >= 0}) for b, _ in out]
    assert sum(len(b) for b, _ in out) == 15  # 5 + 10 + 5 elements: 2 + 1 + 2 dropped


@pytest.mark.parametrize("seed", range(4))
def test_below_an_op_that_expands_a_batch_claims_in_read_order(seed):
    source = zd.Dataset.range(20)
    ds = (
        source.shuffle(20, seed=seed)
        .batch(3)
        .unbatch()
        .map(spread)
        .bucket_by_sequence_length(length, [2, 4], [2, 3, 2], padding_values=-1)
    )
    out = drive(ds, source)
    assert check_invariant(out, SPLITS) == {
        base + i for lo, hi, base in SPLITS for i in range(lo, hi)
    }


def test_an_element_too_long_for_ignore_errors_is_claimed_with_the_next_batch():
    source = zd.Dataset.range(20)
    ds = (
        source.map(spread)
        .bucket_by_sequence_length(
            length, [2, 4], [2, 2, 2], padding_values=-1, pad_to_bucket_boundary=True
        )
        .ignore_errors()
    )
    out = drive(ds, source)
    assert sorted({v for b, _ in out for v in values(b) if v >= 0}) == [
        x for x in range(20) if x % 4 != 3
    ]
    assert check_invariant(out, SPLITS) == {
        base + i for lo, hi, base in SPLITS for i in range(lo, hi)
    }
