"""``padded_batch``: tf.data's documented examples, structures, specs, errors, state."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.dataset.test_lineage import SPLITS, check_invariant, claimed, drive, values
from zmqdata._dataset import graph
from zmqdata.errors import InvalidArgumentError

SETTINGS = settings(max_examples=60, deadline=None, database=None)

# The dataset of tf.data's padded_batch examples: [1], [2, 2], [3, 3, 3], [4, 4, 4, 4].
A = zd.Dataset.range(1, 5).map(lambda x: np.full(x, x, np.int32))


def i32(rows):
    return np.array(rows, np.int32)


# ---------------------------------------------------------------- tf.data's examples


def test_pads_to_the_smallest_size_that_fits_each_batch():
    assert_bit_equal(
        list(A.padded_batch(2)),
        [i32([[1, 0], [2, 2]]), i32([[3, 3, 3, 0], [4, 4, 4, 4]])],
    )


def test_pads_to_a_fixed_size():
    assert_bit_equal(
        list(A.padded_batch(2, padded_shapes=5)),
        [
            i32([[1, 0, 0, 0, 0], [2, 2, 0, 0, 0]]),
            i32([[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]]),
        ],
    )


def test_pads_with_a_custom_value():
    assert_bit_equal(
        list(A.padded_batch(2, padded_shapes=5, padding_values=-1)),
        [
            i32([[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]]),
            i32([[3, 3, 3, -1, -1], [4, 4, 4, 4, -1]]),
        ],
    )


def test_components_of_nested_elements_are_padded_independently():
    elements = [([1, 2, 3], [10]), ([4, 5], [11, 12])]
    ds = zd.Dataset.from_generator(
        lambda: ((i32(a), i32(b)) for a, b in elements)
    ).padded_batch(2, padded_shapes=([4], [None]), padding_values=(-1, 100))
    assert_bit_equal(
        list(ds),
        [(i32([[1, 2, 3, -1], [4, 5, -1, -1]]), i32([[10, 100], [11, 12]]))],
    )


def test_one_padding_value_pads_every_component():
    ds = zd.Dataset.zip((A, A)).padded_batch(2, padding_values=-1)
    first = i32([[1, -1], [2, 2]])
    second = i32([[3, 3, 3, -1], [4, 4, 4, 4]])
    assert_bit_equal(list(ds), [(first, first), (second, second)])


# ---------------------------------------------------------------- structures, dtypes


def test_dicts_strings_and_scalars_pad_leaf_wise():
    rows = [
        {"ids": np.arange(2, dtype=np.int16), "text": np.array(["a", "bcd"]), "y": 1},
        {"ids": np.arange(3, dtype=np.int16), "text": np.array(["ef"]), "y": 2},
    ]
    ds = zd.Dataset.from_generator(lambda: iter(rows)).padded_batch(
        2, padding_values={"ids": -1, "text": None, "y": None}
    )
    [batch] = list(ds)
    assert_bit_equal(batch["ids"], np.array([[0, 1, -1], [0, 1, 2]], np.int16))
    assert_bit_equal(batch["text"], np.array([["a", "bcd"], ["ef", ""]]))
    assert_bit_equal(batch["y"], np.array([1, 2]))


def test_a_longer_string_padding_value_widens_the_dtype():
    ds = zd.Dataset.from_generator(lambda: iter([np.array(["a"]), np.array([], "<U1")]))
    [batch] = list(ds.padded_batch(2, padding_values="<pad>"))
    assert_bit_equal(batch, np.array([["a"], ["<pad>"]]))
    assert batch.dtype == np.dtype("<U5")


def test_every_dimension_pads_independently():
    images = [np.ones((2, 3), np.uint8), np.full((3, 1), 2, np.uint8)]
    [batch] = list(zd.Dataset.from_generator(lambda: iter(images)).padded_batch(2))
    assert_bit_equal(
        batch,
        np.array(
            [[[1, 1, 1], [1, 1, 1], [0, 0, 0]], [[2, 0, 0], [2, 0, 0], [2, 0, 0]]],
            np.uint8,
        ),
    )
    fixed = zd.Dataset.from_generator(lambda: iter(images)).padded_batch(
        2, padded_shapes=[-1, 4]
    )
    assert next(iter(fixed)).shape == (2, 3, 4)


def test_drop_remainder_cardinality_and_spec():
    ds = zd.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32).reshape(5, 2))
    assert ds.padded_batch(2).cardinality() == 3
    assert ds.padded_batch(2, drop_remainder=True).cardinality() == 2
    assert len(list(ds.padded_batch(2, drop_remainder=True))) == 2
    assert ds.padded_batch(2).element_spec == zd.TensorSpec(
        (None, 2), np.dtype(np.float32)
    )
    assert ds.padded_batch(
        2, padded_shapes=[6], drop_remainder=True
    ).element_spec == zd.TensorSpec((2, 6), np.dtype(np.float32))
    assert A.padded_batch(2).element_spec is None  # after a map
    assert zd.Dataset.range(3).repeat().padded_batch(2).cardinality() == (
        zd.INFINITE_CARDINALITY
    )


def test_scalars_batch_as_batch_does():
    assert_bit_equal(
        list(zd.Dataset.range(5).padded_batch(2)), list(zd.Dataset.range(5).batch(2))
    )


def test_survives_serialization():
    ds = A.padded_batch(3, padded_shapes=[None], padding_values=np.int32(-7))
    copy = zd.Dataset(graph.deserialize(graph.serialize(ds._node)))
    assert_bit_equal(list(copy), list(ds))


# ---------------------------------------------------------------- bad input

BAD = {
    "batch_size 0": (
        lambda: A.padded_batch(0),
        ValueError,
        "batch_size must be >= 1, got 0",
    ),
    "batch_size -2": (lambda: A.padded_batch(-2), ValueError, "got -2"),
    "batch_size str": (lambda: A.padded_batch("2"), TypeError, "got '2'"),
    "drop_remainder": (
        lambda: A.padded_batch(2, drop_remainder=1),
        TypeError,
        "drop_remainder must be a bool, got 1",
    ),
    "size -2": (lambda: A.padded_batch(2, padded_shapes=[-2]), ValueError, "got -2"),
    "size str": (lambda: A.padded_batch(2, padded_shapes=["4"]), TypeError, "'4'"),
    "value array": (
        lambda: A.padded_batch(2, padding_values=np.zeros(2)),
        TypeError,
        "must be scalars",
    ),
    "shape too small for the spec": (
        lambda: zd.Dataset.from_tensor_slices(np.zeros((4, 3))).padded_batch(
            2, padded_shapes=[2]
        ),
        ValueError,
        "padded shape [2] of component 0 is smaller than its elements' shape (3,)",
    ),
    "rank against the spec": (
        lambda: zd.Dataset.from_tensor_slices(np.zeros((4, 3))).padded_batch(
            2, padded_shapes=[3, 3]
        ),
        ValueError,
        "has rank 2",
    ),
    "structure against the spec": (
        lambda: zd.Dataset.from_tensor_slices((np.zeros(4), np.zeros(4))).padded_batch(
            2, padded_shapes=[None]
        ),
        ValueError,
        "does not match the elements' structure",
    ),
    "value dtype against the spec": (
        lambda: zd.Dataset.from_tensor_slices(np.zeros((4, 3), np.int8)).padded_batch(
            2, padding_values=0.5
        ),
        ValueError,
        "padding value 0.5 does not fit component 0 of dtype int8",
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_value(name):
    call, error, message = BAD[name]
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_an_element_larger_than_its_padded_shape_names_its_size():
    with pytest.raises(
        InvalidArgumentError,
        match=re.escape(
            "element of size 4 in dimension 0, larger than its padded shape [3]"
        ),
    ):
        list(A.padded_batch(2, padded_shapes=3))


@pytest.mark.parametrize(
    ("elements", "kwargs", "message"),
    [
        ([np.zeros(2), np.zeros((2, 2))], {}, "different ranks [1, 2]"),
        ([np.zeros(2), np.zeros(2)], {"padded_shapes": [2, 2]}, "has rank 2"),
        ([np.zeros(2, np.int8)], {"padding_values": 300}, "300 does not fit"),
        ([np.array(["a"])], {"padding_values": 0}, "0 does not fit"),
        ([(np.zeros(2), np.zeros(2))], {"padded_shapes": [2]}, "does not match"),
        ([np.zeros(2), (np.zeros(2),)], {}, "different structures"),
    ],
)
def test_bad_elements_raise_at_run_time(elements, kwargs, message):
    ds = zd.Dataset.from_generator(lambda: iter(elements)).padded_batch(2, **kwargs)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        list(ds)


# ---------------------------------------------------------------- state, lineage


@pytest.mark.parametrize(
    "ds",
    [
        A.padded_batch(3),
        A.repeat(2).padded_batch(3, padded_shapes=[6], drop_remainder=True),
        zd.Dataset.zip((A, zd.Dataset.range(4))).padded_batch(2, padding_values=-1),
    ],
)
def test_state_roundtrip(ds):
    assert_state_roundtrip(ds)


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 6), max_size=20),
    batch=st.integers(1, 5),
    drop=st.booleans(),
    step=st.integers(0, 25),
)
def test_save_at_a_random_step_and_restore(lengths, batch, drop, step):
    ds = (
        zd.Dataset.from_tensor_slices(np.array(lengths, np.int64))
        .map(lambda n: np.arange(n, dtype=np.int16))
        .padded_batch(batch, drop_remainder=drop)
    )
    assert_save_restore(ds, step)


def assert_save_restore(ds, step):
    """Saves after ``step`` elements (or at the end), restores in a fresh iterator:
    what came before and after equals the uninterrupted run, bit for bit."""
    whole = list(ds)
    with iter(ds) as it:
        head = [next(it) for _ in range(min(step, len(whole)))]
        state = it.save()
    with iter(ds) as it:
        it.restore(state)
        tail = list(it)
    assert_bit_equal(head + tail, whole)


def test_a_padded_batch_claims_its_elements_keys():
    source = zd.Dataset.range(20)
    ds = source.map(lambda x: np.full(int(x) % 3 + 1, x)).padded_batch(
        6, padding_values=-1
    )
    out = drive(ds, source)
    assert claimed(out) == [sorted({v for v in values(b) if v >= 0}) for b, _ in out]
    assert check_invariant(out, SPLITS) == set(range(100, 104)) | set(
        range(204, 209)
    ) | set(range(309, 312)) | set(range(412, 420))


def test_a_dropped_padded_remainder_is_claimed_by_nothing():
    source = zd.Dataset.range(20)
    ds = source.map(lambda x: np.full(2, x)).padded_batch(6, drop_remainder=True)
    assert claimed(drive(ds, source)) == [list(range(6)), list(range(6, 12)),
                                          list(range(12, 18))]  # fmt: skip
