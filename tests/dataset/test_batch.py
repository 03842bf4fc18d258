"""``batch`` and ``unbatch``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, ints
from zmqdata._dataset import structure
from zmqdata.errors import InvalidArgumentError

SETTINGS = settings(max_examples=40, deadline=None, database=None)


def chunks(items, size, drop_remainder):
    out = [items[i : i + size] for i in range(0, len(items), size)]
    if drop_remainder and out and len(out[-1]) < size:
        out.pop()
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 6, 7])
@pytest.mark.parametrize("size", [1, 3, 10])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batch_matches_chunking(n, size, drop_remainder):
    ds = zd.Dataset.range(n).batch(size, drop_remainder=drop_remainder)
    expected = chunks(list(range(n)), size, drop_remainder)
    out = list(ds)
    assert [b.tolist() for b in out] == expected
    assert all(b.dtype == np.int64 for b in out)
    assert ds.cardinality() == len(expected)


def test_batch_spec():
    base = zd.Dataset.from_tensor_slices(np.zeros((7, 2), np.float32))
    assert base.batch(3).element_spec == zd.TensorSpec((None, 2), np.dtype(np.float32))
    assert base.batch(3, drop_remainder=True).element_spec == zd.TensorSpec(
        (3, 2), np.dtype(np.float32)
    )
    assert zd.Dataset.range(3).batch(2).batch(2).element_spec == zd.TensorSpec(
        (None, None), np.dtype(np.int64)
    )
    assert zd.Dataset.range(3).map(lambda x: x).batch(2).element_spec is None


def test_batch_stacks_structures_leaf_wise():
    data = {
        "img": np.arange(12, dtype=np.uint8).reshape(4, 3),
        "meta": (np.arange(4, dtype=np.int16), np.array(["a", "b", "c", "d"])),
    }
    out = list(zd.Dataset.from_tensor_slices(data).batch(3))
    assert len(out) == 2
    assert list(out[0]) == ["img", "meta"]
    assert_bit_equal(out[0]["img"], data["img"][:3])
    assert_bit_equal(out[1]["img"], data["img"][3:])
    assert_bit_equal(out[0]["meta"][0], data["meta"][0][:3])
    assert_bit_equal(out[1]["meta"][1], data["meta"][1][3:])


def test_batch_python_scalars_become_arrays():
    ds = zd.Dataset.from_generator(
        lambda: iter([(1, 0.5, "x", True), (2, 1.5, "yy", False)])
    )
    (ints_, floats, strs, bools) = next(iter(ds.batch(2)))
    assert ints_.dtype == np.int64
    assert ints_.tolist() == [1, 2]
    assert floats.dtype == np.float64
    assert floats.tolist() == [0.5, 1.5]
    assert strs.tolist() == ["x", "yy"]
    assert bools.dtype == np.bool_
    assert bools.tolist() == [True, False]


def test_batch_of_python_scalar_spec():
    spec = zd.Dataset.from_tensors(1.5).repeat(4).batch(2).element_spec
    assert spec == zd.TensorSpec((None,), np.dtype(np.float64))


def test_batch_infinite_and_unknown_cardinality():
    assert (
        zd.Dataset.range(2).repeat().batch(3).cardinality() == zd.INFINITE_CARDINALITY
    )
    unknown = zd.Dataset.range(9).filter(lambda x: True).batch(3)
    assert unknown.cardinality() == zd.UNKNOWN_CARDINALITY


def test_batch_of_different_shapes_is_an_error():
    ds = zd.Dataset.from_generator(lambda: iter([np.zeros(2), np.zeros(3)])).batch(2)
    with pytest.raises(InvalidArgumentError, match="different shapes"):
        list(ds)


def test_batch_of_different_structures_is_an_error():
    ds = zd.Dataset.from_generator(lambda: iter([(1, 2), {"a": 1}])).batch(2)
    with pytest.raises(InvalidArgumentError, match="different structures"):
        list(ds)


# ---------------------------------------------------------------- unbatch


def test_unbatch_splits_along_axis_0():
    data = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    ds = zd.Dataset.from_tensors(data).unbatch()
    assert_bit_equal(list(ds), [data[0], data[1]])
    assert ds.element_spec == zd.TensorSpec((3, 2), np.dtype(np.float32))


def test_unbatch_of_batches_restores_elements_and_structures():
    data = {"a": np.arange(5, dtype=np.int8), "b": (np.arange(10.0).reshape(5, 2),)}
    ds = zd.Dataset.from_tensor_slices(data)
    roundtrip = list(ds.batch(2).unbatch())
    assert_bit_equal(roundtrip, list(ds))
    assert ds.batch(2).unbatch().element_spec == ds.element_spec


def test_unbatch_skips_empty_batches():
    batches = [np.zeros((0,)), np.arange(2.0), np.zeros((0,)), np.arange(1.0)]
    ds = zd.Dataset.from_generator(lambda: iter(batches)).unbatch()
    assert ints(ds) == [0.0, 1.0, 0.0]


def test_unbatch_cardinality():
    assert zd.Dataset.range(0).batch(2).unbatch().cardinality() == 0
    inf = zd.Dataset.range(4).batch(2).repeat().unbatch()
    assert inf.cardinality() == zd.INFINITE_CARDINALITY
    assert zd.Dataset.from_generator(list).unbatch().cardinality() == (
        zd.UNKNOWN_CARDINALITY
    )


def test_unbatch_of_mismatched_first_dims_is_an_error():
    ds = zd.Dataset.from_tensors((np.zeros(2), np.zeros(3))).unbatch()
    with pytest.raises(InvalidArgumentError, match="first dimension"):
        list(ds)


# ---------------------------------------------------------------- properties


@SETTINGS
@given(
    n=st.integers(0, 30),
    size=st.integers(1, 8),
    drop_remainder=st.booleans(),
)
def test_batch_unbatch_roundtrip(n, size, drop_remainder):
    ds = zd.Dataset.range(n)
    out = ints(ds.batch(size, drop_remainder=drop_remainder).unbatch())
    kept = n - n % size if drop_remainder else n
    assert out == list(range(kept))


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(st.integers(-(2**31), 2**31), st.floats(allow_nan=False)),
        max_size=12,
    ),
    size=st.integers(1, 5),
)
def test_batch_matches_stacking(rows, size):
    ds = zd.Dataset.from_generator(lambda: iter(rows)).batch(size)
    expected = [
        (np.array([a for a, _ in chunk]), np.array([b for _, b in chunk]))
        for chunk in chunks(rows, size, False)
    ]
    assert_bit_equal(list(ds), expected)


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.uint16, np.int64, np.float32, np.float64, np.bool_, np.complex64],
)
def test_batch_of_numpy_scalars_keeps_their_dtype(dtype):
    values = np.arange(5).astype(dtype)
    [batch] = list(zd.Dataset.from_tensor_slices(values).batch(5))
    assert batch.dtype == np.dtype(dtype)
    assert np.array_equal(batch, values)


def test_batch_of_mixed_scalar_types_takes_the_general_path():
    mixed = [np.int32(1), np.int64(2)]
    assert (
        structure.stack(mixed).dtype == np.stack([np.asarray(m) for m in mixed]).dtype
    )


def test_batch_of_transposed_views_is_c_contiguous_and_equal_to_np_stack():
    hwc = np.arange(2 * 4 * 5 * 3, dtype=np.float32).reshape(2, 4, 5, 3)
    chw = [image.transpose(2, 0, 1) for image in hwc]  # not C-contiguous
    images = zd.Dataset.from_tensor_slices(hwc).map(lambda i: i.transpose(2, 0, 1))
    (batch,) = images.batch(2)
    assert batch.flags.c_contiguous
    assert batch.dtype == np.float32
    assert np.array_equal(batch, np.stack(chw))
    mixed = structure.stack([chw[0], chw[1].astype(np.float64)])
    assert mixed.flags.c_contiguous
    assert mixed.dtype == np.float64
    assert np.array_equal(mixed, np.stack(chw))
