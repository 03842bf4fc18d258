"""Element specs to bytes and back (what the dispatcher stores for from_dataset_id)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zmqdata as zd
from zmqdata._dataset.specs import decode_spec, encode_spec
from zmqdata._dataset.structure import TensorSpec
from zmqdata._wire import frames
from zmqdata.errors import InvalidArgumentError

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

DTYPES = [
    np.dtype(name)
    for name in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        ">i4",
        ">f8",
        "<U7",
        "|S3",
        "datetime64[ns]",
        "O",
    )
]
PYTHON_TYPES = [bool, int, float, complex, str, bytes, type(None)]

leaves = st.builds(
    TensorSpec,
    st.lists(st.none() | st.integers(0, 2**40), max_size=4).map(tuple),
    st.sampled_from([*DTYPES, *PYTHON_TYPES]),
)
nested = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def assert_same_spec(got, want):
    assert type(got) is type(want)
    if isinstance(want, TensorSpec):
        assert got.shape == want.shape
        if isinstance(want.dtype, type):
            assert got.dtype is want.dtype
        else:
            assert isinstance(got.dtype, np.dtype)
            assert got.dtype.str == want.dtype.str
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same_spec(got[key], want[key])
    else:
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same_spec(g, w)


@FAST
@given(spec=nested)
def test_nested_specs_round_trip(spec):
    data = encode_spec(spec)
    assert isinstance(data, bytes)
    assert_same_spec(decode_spec(data), spec)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_with_unknown_dims(dtype):
    spec = TensorSpec((None, 3, 0), dtype)
    assert_same_spec(decode_spec(encode_spec(spec)), spec)


def test_unknown_spec_is_empty_bytes():
    assert encode_spec(None) == b""
    assert decode_spec(b"") is None


@pytest.mark.parametrize(
    "dataset",
    [
        zd.Dataset.range(3),
        zd.Dataset.from_tensor_slices(
            {"x": np.zeros((4, 2), np.float32), "y": np.arange(4, dtype=np.uint8)}
        ),
        zd.Dataset.from_tensors(("text", b"raw", 1, 2.5, True, [np.int8(1)])),
        zd.Dataset.range(10).batch(3),
        zd.Dataset.zip(
            (zd.Dataset.range(2), zd.Dataset.from_tensor_slices(np.ones((2, 3), bool)))
        ),
    ],
    ids=["range", "dict", "python", "batch", "zip"],
)
def test_dataset_specs_round_trip(dataset):
    spec = dataset.element_spec
    assert spec is not None
    assert_same_spec(decode_spec(encode_spec(spec)), spec)
    assert decode_spec(encode_spec(spec)) == spec


def leaf_bytes(structure) -> bytes:
    parts = frames.encode([structure])
    return bytes(memoryview(parts[0]).cast("B"))


@pytest.mark.parametrize(
    "leaf",
    [
        "",
        "float32",
        "a|b|c",
        "notadtype|3",
        "<f4|x",
        "i4,(|",
        "M8[x]|",
        "py:list|",
        "py:object|",
        5,
    ],
)
def test_malformed_leaves_are_invalid_argument(leaf):
    with pytest.raises(InvalidArgumentError):
        decode_spec(leaf_bytes({"x": leaf}))


@pytest.mark.parametrize("data", [b"\x00", b"\xff" * 10, b"garbage bytes"])
def test_malformed_bytes_are_invalid_argument(data):
    with pytest.raises(InvalidArgumentError):
        decode_spec(data)


@FAST
@given(text=st.text(max_size=12))
def test_arbitrary_leaf_text_decodes_or_raises_invalid_argument(text):
    try:
        spec = decode_spec(leaf_bytes([text]))
    except InvalidArgumentError:
        return
    assert isinstance(spec[0], TensorSpec)
