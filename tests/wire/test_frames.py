from __future__ import annotations

import collections
import math
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zmqdata._wire.frames import decode, encode
from zmqdata._wire.schema import INLINE_MAX
from zmqdata.errors import InvalidArgumentError

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# --- helpers ----------------------------------------------------------------------


def assert_same(got: Any, want: Any, path: str = "") -> None:
    """Exact equality: types, dtypes (byte order too), shapes, bits, key order."""
    assert type(got) is type(want), f"{path}: {type(got)} != {type(want)}"
    if isinstance(want, np.ndarray) and want.dtype.kind == "O":
        assert got.dtype.kind == "O", path
        assert got.shape == want.shape, path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, np.ndarray | np.generic):
        assert got.dtype.str == want.dtype.str, path
        assert got.shape == want.shape, path
        assert (
            np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
        )
    elif isinstance(want, float):
        assert struct.pack("<d", got) == struct.pack("<d", want), path
    elif isinstance(want, tuple | list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), path
        for key in want:
            assert_same(got[key], want[key], f"{path}[{key!r}]")
    else:
        assert got == want, path


def ragged(*pieces: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A 1-D object array holding ``pieces``."""
    result = np.empty(len(pieces), dtype=object)
    for index, piece in enumerate(pieces):
        result[index] = piece
    return result


def round_trip(elements: Sequence[Any], **kwargs: Any) -> list[Any]:
    frames = encode(elements, **kwargs)
    got, meta = decode(frames)
    assert_same(got, list(elements))
    assert meta == dict(kwargs.get("meta") or {})
    return frames


def header(frames: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = msgpack.unpackb(bytes(frames[0]), strict_map_key=False)
    return out


def repack(frames: list[Any], edit: Callable[[dict[str, Any]], object]) -> list[Any]:
    """The frames with their header edited by ``edit`` (in place)."""
    head = header(frames)
    edit(head)
    return [msgpack.packb(head), *frames[1:]]


def bits(
    dtype: np.dtype[Any], shape: tuple[int, ...], data: bytes
) -> np.ndarray[Any, Any]:
    """An array of ``dtype`` and ``shape`` holding arbitrary bits (NaN payloads...)."""
    count = math.prod(shape)
    raw = (data * (count * dtype.itemsize // max(len(data), 1) + 1))[
        : count * dtype.itemsize
    ]
    if len(raw) < count * dtype.itemsize:
        raw = bytes(count * dtype.itemsize)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


# --- strategies -------------------------------------------------------------------

ARRAY_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.unicode_string_dtypes(endianness="?", min_len=1, max_len=4),
    hnp.byte_string_dtypes(min_len=1, max_len=4),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
)
SCALAR_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(),
    hnp.unsigned_integer_dtypes(),
    hnp.floating_dtypes(sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(),
    hnp.datetime64_dtypes(),
    hnp.timedelta64_dtypes(),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
PY_TYPES = st.sampled_from(["none", "bool", "int", "bigint", "float", "str", "bytes"])


def floats_with_payloads() -> st.SearchStrategy[float]:
    raw = st.integers(0, (1 << 64) - 1).map(
        lambda u: struct.unpack("<d", struct.pack("<Q", u))[0]
    )
    return st.one_of(st.floats(), raw)


def python_values(name: str) -> st.SearchStrategy[Any]:
    return {
        "none": st.none(),
        "bool": st.booleans(),
        "int": st.integers(-(1 << 63), (1 << 63) - 1),
        "bigint": st.integers(-(1 << 200), 1 << 200),
        "float": floats_with_payloads(),
        "str": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
    }[name]


# A schema fixes a structure, its dtypes and shapes; many elements can share one.
LEAF_SCHEMAS = st.one_of(
    st.tuples(
        st.just("array"), ARRAY_DTYPES, SHAPES, st.sampled_from(["c", "step", "T"])
    ),
    st.tuples(st.just("scalar"), SCALAR_DTYPES),
    st.tuples(st.just("flexible"), st.sampled_from([np.str_, np.bytes_])),
    st.tuples(st.just("python"), PY_TYPES),
)
SCHEMAS = st.recursive(
    LEAF_SCHEMAS,
    lambda children: st.one_of(
        st.tuples(st.just("tuple"), st.lists(children, max_size=3)),
        st.tuples(st.just("list"), st.lists(children, max_size=3)),
        st.tuples(
            st.just("dict"),
            st.dictionaries(st.text(max_size=3), children, max_size=3).map(
                lambda d: list(d.items())
            ),
        ),
    ),
    max_leaves=5,
)


def arrays_for(
    dtype: np.dtype[Any], shape: tuple[int, ...], layout: str
) -> st.SearchStrategy[Any]:
    def make(data: bytes) -> np.ndarray[Any, Any]:
        if layout == "step" and shape:  # every other item of a twice longer array
            wide = bits(dtype, (shape[0] * 2, *shape[1:]), data)
            return wide[::2]
        if layout == "T":
            return bits(dtype, shape[::-1], data).T
        return bits(dtype, shape, data)

    return st.binary(min_size=1, max_size=64).map(make)


def values_for(schema: Any) -> st.SearchStrategy[Any]:
    kind = schema[0]
    if kind == "array":
        return arrays_for(*schema[1:])
    if kind == "scalar":
        return st.binary(min_size=1, max_size=16).map(
            lambda b: bits(schema[1], (), b)[()]
        )
    if kind == "flexible":
        text = st.text(max_size=4).filter(lambda s: not s.endswith("\x00"))
        if schema[1] is np.str_:
            return text.map(np.str_)
        return (
            st.binary(max_size=4)
            .filter(lambda b: not b.endswith(b"\x00"))
            .map(np.bytes_)
        )
    if kind == "python":
        return python_values(schema[1])
    if kind == "tuple":
        return st.tuples(*map(values_for, schema[1]))
    if kind == "list":
        return st.tuples(*map(values_for, schema[1])).map(list)
    keys = [key for key, _ in schema[1]]
    return st.tuples(*(values_for(child) for _, child in schema[1])).map(
        lambda vals: dict(zip(keys, vals, strict=True))
    )


HOMOGENEOUS = SCHEMAS.flatmap(
    lambda schema: st.lists(values_for(schema), min_size=1, max_size=40)
)
MIXED = st.lists(SCHEMAS.flatmap(values_for), max_size=6)
LEVELS = st.sampled_from([None, 1, 3])


# --- round trips ------------------------------------------------------------------


@FAST
@given(HOMOGENEOUS, LEVELS)
def test_homogeneous_batches_round_trip(elements: list[Any], level: int | None) -> None:
    round_trip(elements, compression_level=level, meta={"seq": 1})


@FAST
@given(MIXED, LEVELS)
def test_mixed_batches_round_trip(elements: list[Any], level: int | None) -> None:
    round_trip(elements, compression_level=level)


@FAST
@given(st.lists(floats_with_payloads(), min_size=1, max_size=40))
def test_python_float_bits_survive(values: list[float]) -> None:
    round_trip(values)


@FAST
@given(st.lists(st.integers(), min_size=1, max_size=40))
def test_python_ints_of_any_size(values: list[int]) -> None:
    round_trip(values)


def test_numpy_scalars_use_one_column() -> None:
    elements = [np.int64(i) for i in range(1000)]
    frames = round_trip(elements)
    assert len(frames) == 1
    assert header(frames)["c"][0] == "s"


def test_tuples_of_scalar_and_small_array_are_columnar() -> None:
    elements = [(np.int64(i), np.full(8, i, np.float32)) for i in range(1000)]
    frames = round_trip(elements)
    spec = header(frames)["c"]
    assert [leaf[0] for leaf in spec[1]] == ["s", "a"]


@pytest.mark.parametrize(
    ("values", "tag"),
    [
        ([1, -2, 3] * 10, "p"),
        ([1.5, -0.0, math.inf] * 10, "p"),
        ([True, False] * 10, "p"),
        ([1, 2, 3], "v"),  # few: inline msgpack values
        ([1 << 70, 2] * 10, "v"),  # beyond int64
        (["a", "bc"] * 10, "v"),
        ([None] * 20, "v"),
    ],
)
def test_python_scalars_keep_their_type(values: list[Any], tag: str) -> None:
    frames = round_trip(values)
    assert header(frames)["c"][0] == tag


def test_empty_batch() -> None:
    frames = round_trip([], meta={"eos": True})
    assert len(frames) == 1


@pytest.mark.parametrize(
    "array",
    [
        np.array([True, False, True]),
        np.array(["", "héllo", "\U0001f600"], dtype="<U5"),
        np.array(["ab", "c"], dtype=">U2"),
        np.array([b"", b"x\x00y", b"abc"]),
        np.array(7),
        np.array(1.5, dtype=">f8"),
        np.array([1, 2, 3], dtype=">i4"),
        np.array([1, 2, 3], dtype="<u2"),
        np.array([1 + 2j], dtype=np.complex64),
        np.array(["2020-01-01", "NaT"], dtype="M8[D]"),
        np.array([1, -1], dtype=">m8[ns]"),
        np.zeros(0, dtype=np.float32),
        np.zeros((3, 0, 2), dtype=np.int16),
        np.arange(24.0).reshape(2, 3, 4)[:, ::2, ::-1],
        np.arange(12).reshape(3, 4).T,
        np.arange(30, dtype=np.uint8)[::3],
        np.frombuffer(struct.pack("<2Q", 0x7FF0000000000123, 1 << 63), dtype="<f8"),
        np.frombuffer(struct.pack("<I", 0x7F800001), dtype=np.float32),
        np.array([np.nan], dtype=np.float16),
    ],
    ids=repr,
)
@pytest.mark.parametrize("level", [None, 3])
def test_arrays(array: np.ndarray[Any, Any], level: int | None) -> None:
    round_trip([array], compression_level=level)
    round_trip([array, array.copy()], compression_level=level)


def test_zero_d_arrays_stay_arrays() -> None:
    got, _ = decode(encode([np.array(5), (np.array(5),), np.array(5)]))
    assert [type(x) for x in got] == [np.ndarray, tuple, np.ndarray]
    got, _ = decode(encode([np.array(i) for i in range(20)]))
    assert all(type(x) is np.ndarray and x.shape == () for x in got)


@pytest.mark.parametrize(
    "scalar",
    [
        np.bool_(True),
        np.int8(-3),
        np.uint64((1 << 64) - 1),
        np.float16(0.5),
        np.float32(-0.0),
        np.float64(math.nan),
        np.complex128(1 - 1j),
        np.datetime64("2021-05-06T07:08", "m"),
        np.timedelta64(5, "h"),
        np.str_("a\x00"),  # a trailing NUL that an array would drop
        np.bytes_(b"x\x00"),
    ],
    ids=repr,
)
def test_numpy_scalars_stay_scalars(scalar: np.generic) -> None:
    round_trip([scalar])
    round_trip([scalar] * 20)


def test_python_scalars() -> None:
    round_trip(
        [
            None,
            True,
            0,
            -(1 << 63),
            (1 << 64) - 1,
            1 << 100,
            -0.0,
            math.nan,
            "é",
            b"\x00",
        ]
    )


def test_nested_structures() -> None:
    element = {
        "image": np.zeros((4, 4, 3), np.uint8),
        "label": np.int64(3),
        "meta": ({"name": "x", "tags": ["a", "b"]}, [np.float32(1.0), None]),
        "empty": ((), [], {}),
    }
    round_trip([element])
    round_trip([element] * 5)


def test_dict_key_order_is_kept() -> None:
    frames = round_trip([{"b": 1, "a": 2}, {"a": 2, "b": 1}])
    assert "r" in header(frames)  # different key orders are different structures


def test_mixed_batches_use_rows() -> None:
    elements = [np.int64(1), np.int32(2), (np.int64(3),), np.zeros(3), np.zeros(4)]
    frames = round_trip(elements)
    assert len(header(frames)["r"]) == 5


def test_leafless_structures_use_rows() -> None:
    frames = round_trip([(), ()])
    assert "r" in header(frames)


@pytest.mark.parametrize("level", [None, 3])
def test_big_array_is_zero_copy(level: int | None) -> None:
    array = np.arange(16 << 20, dtype=np.float32)  # 64 MiB, not very compressible
    array[::2] = np.sin(array[::2])
    frames = encode([array], compression_level=level)
    assert len(frames) == 2
    assert len(frames[0]) < 200
    if level is None:
        assert np.shares_memory(np.frombuffer(frames[1], np.uint8), array)
    got, _ = decode([frames[0], bytearray(frames[1])])
    assert_same(got, [array])


def test_big_leaves_are_not_stacked() -> None:
    arrays = [np.full(INLINE_MAX, i, np.uint8) for i in range(3)]
    frames = round_trip(arrays)
    assert len(frames) == 4
    assert all(
        np.shares_memory(np.frombuffer(f, np.uint8), a)
        for f, a in zip(frames[1:], arrays, strict=True)
    )


def test_small_arrays_are_inline() -> None:
    assert len(encode([np.zeros(INLINE_MAX - 1, np.uint8)])) == 1
    assert len(encode([np.zeros(INLINE_MAX, np.uint8)])) == 2


def test_inline_budget_per_message() -> None:
    arrays = [np.full(60_000, i, np.uint8) for i in range(40)]  # 2.4 MB in all
    frames = round_trip([*arrays, None])  # rows: arrays of their own
    assert 1 < len(frames) < 41


def test_compression_is_recorded_per_buffer() -> None:
    smooth = np.zeros(1 << 20, np.float32)
    noise = np.random.default_rng(0).integers(0, 255, 1 << 20, dtype=np.uint8)
    frames = round_trip([smooth, noise], compression_level=3)
    assert header(frames)["b"] == [["zstd", smooth.nbytes], [None, noise.nbytes]]
    assert len(frames[1]) < 10_000


def test_columns_are_compressed() -> None:
    frames = round_trip([np.int64(7)] * 10_000, compression_level=3)
    assert header(frames)["b"] == [["zstd", 80_000]]


def test_columns_of_more_objects_than_the_floor_stay_raw() -> None:
    """A receiver could not tell them from a forged count (see test_limits)."""
    frames = round_trip([np.int64(7)] * 100_000, compression_level=3)
    assert header(frames)["b"] == [[None, 800_000]]


def test_meta_round_trip() -> None:
    meta = {"seq": 12, "eos": False, "job": "abc", "stamps": [1.5, None], 3: b"x"}
    _, got = decode(encode([1], meta=meta))  # type: ignore[arg-type]
    assert got == meta


def test_zmq_frames_are_decoded_writable() -> None:
    array = np.arange(100_000, dtype=np.int32)
    frames = [zmq.Frame(bytes(f)) for f in encode([array, np.arange(3)])]
    got, _ = decode(frames)
    assert_same(got, [array, np.arange(3)])
    got[0][0] = 5  # zmq.Frame memory is writable
    got[1][0] = 5  # inline data is copied out of the header


def test_read_only_frames_give_read_only_views() -> None:
    array = np.arange(100_000, dtype=np.int32)
    frames = [bytes(f) for f in encode([array])]
    got, _ = decode(frames)
    assert not got[0].flags.writeable
    got, _ = decode([frames[0], bytearray(frames[1])])
    assert got[0].flags.writeable


# --- rejected input -----------------------------------------------------------------


class Custom:
    pass


@pytest.mark.parametrize("level", [None, 3])
def test_ragged_leaves_travel_as_values_and_lengths(level: int | None) -> None:
    tokens = ragged(np.arange(5, dtype=">i4"), np.arange(0, dtype=">i4"))
    big = ragged(np.zeros(INLINE_MAX, np.float64), np.ones(3, np.float64))
    text = ragged(np.array(["a", "bc"]), np.array(["de"]))
    elements = [{"l": tokens, "i": np.int64(1)}, {"l": big, "i": np.int64(2)}, text]
    frames = round_trip(elements, compression_level=level)
    assert len(frames) == 2  # the big values: one frame, not one per array
    got = decode(frames)[0][1]["l"]
    assert got[0].base is got[1].base  # views of one buffer
    assert got[0].flags.writeable


Point = collections.namedtuple("Point", "x")


@pytest.mark.parametrize(
    ("element", "match"),
    [
        (np.array([object()]), "dtype object"),
        (np.empty(0, dtype=object), r"dtype object of shape \(0,\)"),
        (ragged(np.zeros((1, 2))), "1-D numpy arrays"),
        (ragged(np.zeros(2), np.zeros(2, np.float32)), "of one dtype"),
        (ragged(b"x"), "dtype object"),
        (np.full((2, 2), None).astype(object), r"shape \(2, 2\)"),
        (np.zeros(2, dtype=[("a", "i4")]), "structured|dtype"),
        (np.zeros(2, dtype="V4"), "V4|void"),
        (np.zeros(2, dtype=[("a", "i4")])[0], "numpy scalar dtype"),
        ({1, 2}, "builtins.set"),
        (Custom(), "Custom"),
        ({1: "x"}, "dict key 1 is not a str"),
        ({"a": [1, {2}]}, r"element 1\['a'\]\[1\]: unsupported type builtins.set"),
        (collections.OrderedDict(a=1), "OrderedDict"),
        (Point(1), "Point"),
        (np.ma.masked_array([1]), "array subclass MaskedArray"),
        (bytearray(b"x"), "bytearray"),
        (1j, "complex"),
    ],
    ids=lambda value: re.sub(
        r" at 0x[0-9a-f]+", "", repr(value)
    ),  # same in every process
)
def test_unsupported_elements(element: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        encode([1, element])


def test_deep_and_cyclic_structures_are_rejected() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(InvalidArgumentError, match="nested deeper"):
        encode([cyclic])
    deep: Any = 1
    for _ in range(100):
        deep = (deep,)
    with pytest.raises(InvalidArgumentError, match="nested deeper"):
        encode([deep])


@pytest.mark.parametrize("level", [23, "3", 1.5, True])
def test_bad_compression_level(level: object) -> None:
    with pytest.raises(InvalidArgumentError, match="compression level"):
        encode([1], compression_level=level)  # type: ignore[arg-type]


@pytest.mark.parametrize("meta", [{"x": np.int64(1)}, {"x": object()}, [("a", 1)]])
def test_bad_meta(meta: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="meta"):
        encode([1], meta=meta)


# --- malformed frames ---------------------------------------------------------------

VALID = encode([np.arange(100_000, dtype=np.int32), {"a": np.float32(1), "b": "x"}, 5])
COLUMNAR = encode([(np.int64(i), np.arange(3.0)) for i in range(50)], meta={"k": 1})
COMPRESSED = encode([np.zeros(100_000, np.int32)], compression_level=3)


def reject(frames: Sequence[Any], match: str = "") -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        decode(frames)


def test_garbage_and_truncated_headers() -> None:
    reject([], "no frames")
    reject([b""], "msgpack")
    reject([b"\xc1"], "msgpack")
    reject([bytes(VALID[0])[:-3], VALID[1]], "msgpack")
    reject([bytes(VALID[0]) + b"\x00", VALID[1]], "msgpack")
    reject([msgpack.packb([1, 2])], "map")
    reject([object()], "buffer protocol")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda h: h.update(v=2), "version 2"),
        (lambda h: h.update(v="1"), "version"),
        (lambda h: h.pop("v"), "version"),
        (lambda h: h.update(n=-1), "negative"),
        (lambda h: h.update(n=True), "'n' must be int"),
        (lambda h: h.update(n=4), "rows"),
        (lambda h: h.pop("m"), "missing field 'm'"),
        (lambda h: h.update(m=[]), "'m' must be dict"),
        (lambda h: h.update(b={}), "'b' must be list"),
        (lambda h: h.update(b=[]), "1 frames follow"),
        (lambda h: h.update(b=[[None, 3]]), "buffer 0"),
        (lambda h: h.update(b=[[None]]), "malformed"),
        (lambda h: h.update(b=[[5, 400_000]]), "codec"),
        (lambda h: h.update(b=[["lz4", 400_000]]), "unknown compression codec"),
        (lambda h: h.update(b=[["zstd", 400_000]]), "zstd"),
        (lambda h: h.update(b=[[None, -1]]), "bad size"),
        (lambda h: h.update(c=h["r"]), "exactly one"),
        (lambda h: h.pop("r"), "exactly one"),
        (lambda h: h.update(r={}), "'r' must be list"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [100_000], 1]), "reference"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [99_999], 0]), "400000 bytes"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i8", [100_000], 0]), "bytes"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [100_000]]), "needs 4 fields"),
        (lambda h: h["r"].__setitem__(0, ["a", "|O", [100_000], 0]), "not allowed"),
        (lambda h: h["r"].__setitem__(0, ["a", "<V4", [100_000], 0]), "dtype"),
        (lambda h: h["r"].__setitem__(0, ["a", "i4,f8", [100_000], 0]), "dtype"),
        (lambda h: h["r"].__setitem__(0, ["a", "int32", [100_000], 0]), "not allowed"),
        (lambda h: h["r"].__setitem__(0, ["a", "nonsense", [100_000], 0]), "bad dtype"),
        (lambda h: h["r"].__setitem__(0, ["a", 5, [100_000], 0]), "bad dtype"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", 100_000, 0]), "bad shape"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [-1], 0]), "bad shape"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [1] * 65, 0]), "bad shape"),
        (lambda h: h["r"].__setitem__(0, ["a", "<i4", [1.0], 0]), "bad shape"),
        (
            lambda h: h["r"].__setitem__(0, ["s", "<U2", b"a\x00\x00\x00"]),
            "not allowed",
        ),
        (lambda h: h["r"].__setitem__(0, ["z", 1]), "unknown SPEC tag"),
        (lambda h: h["r"].__setitem__(0, []), "malformed SPEC"),
        (lambda h: h["r"].__setitem__(0, "a"), "malformed SPEC"),
        (lambda h: h["r"].__setitem__(2, ["v", "int", [5, 6]]), "1 values"),
        (lambda h: h["r"].__setitem__(2, ["v", "int", ["5"]]), "other types"),
        (lambda h: h["r"].__setitem__(2, ["v", "int", [True]]), "other types"),
        (lambda h: h["r"].__setitem__(2, ["v", "object", [5]]), "unknown value type"),
        (lambda h: h["r"].__setitem__(2, ["p", "int", b"\x00" * 4]), "bytes"),
        (
            lambda h: h["r"].__setitem__(2, ["p", "complex", b"\x00" * 8]),
            "typed column",
        ),
        (lambda h: h["r"].__setitem__(2, ["T", ["v", "int", [5]]]), "malformed SPEC"),
        (lambda h: h["r"].__setitem__(2, ["D", ["a"], []]), "dict SPEC keys"),
        (
            lambda h: h["r"].__setitem__(2, ["D", [1], [["v", "int", [5]]]]),
            "dict SPEC keys",
        ),
        (
            lambda h: h["r"].__setitem__(2, ["L", ["v", "int", [5]], 3]),
            "needs 2 fields",
        ),
    ],
)
def test_malformed_headers(
    edit: Callable[[dict[str, Any]], object], match: str
) -> None:
    reject(repack(VALID, edit), match)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda h: h.update(n=49), "bytes"),
        (lambda h: h.update(n=10**12), "cannot fit"),
        (lambda h: h["c"][1][1].__setitem__(2, [4]), "bytes"),
        (lambda h: h["c"][1].__setitem__(0, ["s", "<i8", b""]), "bytes"),
    ],
)
def test_malformed_columnar_headers(
    edit: Callable[[dict[str, Any]], object], match: str
) -> None:
    reject(repack(COLUMNAR, edit), match)


RAGGED = encode([ragged(np.arange(2, dtype=np.int32), np.arange(3, dtype=np.int32))])


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda h: h["r"][0].__setitem__(2, 0), "bad ragged leaf of 0 arrays"),
        (lambda h: h["r"][0].__setitem__(2, 10**9), "bad ragged leaf of 1000000000"),
        (lambda h: h["r"][0].__setitem__(2, "2"), "bad ragged leaf of '2'"),
        (lambda h: h["r"][0].__setitem__(2, 3), "16 bytes but 3 x <i8"),
        (lambda h: h["r"][0].__setitem__(1, "|O"), "not allowed"),
        (lambda h: h["r"][0].pop(), "needs 5 fields"),
        (
            lambda h: h["r"][0].__setitem__(4, struct.pack("<2q", -1, 6)),
            "bad ragged lengths",
        ),
        (lambda h: h["r"][0].__setitem__(4, struct.pack("<2q", 2, 4)), "6 x <i4"),
    ],
)
def test_malformed_ragged_leaves(
    edit: Callable[[dict[str, Any]], object], match: str
) -> None:
    reject(repack(RAGGED, edit), match)


def test_ragged_leaves_are_refused_in_columns() -> None:
    leaf = header(RAGGED)["r"][0]
    columnar = repack(COLUMNAR, lambda h: h["c"][1].__setitem__(1, leaf))
    reject(columnar, "bad ragged leaf of 2 arrays in a column of 50")


def test_forged_count_of_empty_elements_is_bounded() -> None:
    frames = [msgpack.packb({"v": 1, "n": 10**15, "m": {}, "c": ["T", []], "b": []})]
    reject(frames, "cannot fit")
    frames = [
        msgpack.packb(
            {"v": 1, "n": 10**9, "m": {}, "c": ["a", "<f4", [0], b""], "b": []}
        )
    ]
    reject(frames, "cannot fit")


def test_frame_count_and_buffer_use() -> None:
    reject(VALID[:1], "1 buffers but 0 frames")
    reject([*VALID, b"extra"], "1 buffers but 2 frames")
    reject([VALID[0], bytes(VALID[1])[:-1]], "expected 400000")
    twice = repack(VALID, lambda h: h["r"][1][2][0].__setitem__(2, 0))
    reject(twice, "bytes|twice")
    unused = repack(VALID, lambda h: h["r"].__setitem__(0, ["v", "int", [1]]))
    reject(unused, "not referenced")


def test_decompression_bombs_are_capped() -> None:
    reject(
        repack(COMPRESSED, lambda h: h["b"][0].__setitem__(1, 1000)), "declares 400000"
    )
    reject([COMPRESSED[0], bytes(COMPRESSED[1])[:-4]], "zstd")


def test_unknown_msgpack_extension() -> None:
    reject([msgpack.packb({"v": 1, "x": msgpack.ExtType(7, b"")})], "extension")


JUNK = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(1 << 63), (1 << 64) - 1),
        st.floats(),
        st.text(max_size=6),
        st.binary(max_size=12),
        st.sampled_from(
            ["T", "L", "D", "a", "s", "p", "v", "<i4", "|b1", "int", "zstd"]
        ),
    ),
    lambda children: st.lists(children, max_size=4),
    max_leaves=8,
)


def mutate(node: Any, data: st.DataObject) -> Any:
    """``node`` with one randomly chosen sub-node replaced by junk."""
    children: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        children = list(node.items())
    elif isinstance(node, list):
        children = list(enumerate(node))
    if not children or data.draw(st.integers(0, 3)) == 0:
        return data.draw(JUNK)
    key, child = data.draw(st.sampled_from(children))
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[key] = mutate(child, data)
    return copy


@FAST
@given(st.data(), st.sampled_from([VALID, COLUMNAR, COMPRESSED]))
def test_mutated_headers_raise_only_invalid_argument(
    data: st.DataObject, frames: list[Any]
) -> None:
    head = mutate(header(frames), data)
    assert_decodes_or_refuses([msgpack.packb(head), *frames[1:]])


@FAST
@given(st.data(), st.sampled_from([VALID, COLUMNAR, COMPRESSED]))
def test_corrupted_bytes_raise_only_invalid_argument(
    data: st.DataObject, frames: list[Any]
) -> None:
    index = data.draw(st.integers(0, len(frames) - 1))
    raw = bytearray(bytes(frames[index]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    damaged = list(frames)
    damaged[index] = raw[:cut] if data.draw(st.booleans()) else raw
    assert_decodes_or_refuses(damaged)


@FAST
@given(st.lists(st.binary(max_size=64), max_size=3))
def test_random_bytes_raise_only_invalid_argument(frames: list[bytes]) -> None:
    assert_decodes_or_refuses(frames)


def assert_decodes_or_refuses(frames: list[Any]) -> None:
    """Damaged input decodes to a list of elements or raises InvalidArgumentError.

    Any other exception escapes and fails the test.
    """
    try:
        elements, meta = decode(frames)
    except InvalidArgumentError:
        return
    assert isinstance(elements, list)
    assert isinstance(meta, dict)


@pytest.mark.parametrize(
    ("elements", "total"),
    [
        ([np.broadcast_to(np.zeros(1, np.uint8), (2**30 + 1,))], 2**30 + 1),
        ([np.broadcast_to(np.zeros(1, np.uint8), (600 << 20,))] * 2, 1200 << 20),
        ([{"a": b"x" * 100, "b": np.broadcast_to(np.zeros(1), (2**27,))}], 2**30 + 100),
    ],
    ids=["one-array", "two-arrays", "bytes-and-array"],
)
def test_elements_over_a_message_are_refused_before_serializing(
    elements: list[Any], total: int
) -> None:
    """The broadcast arrays hold a few bytes: encoding them would copy gigabytes."""
    with pytest.raises(InvalidArgumentError) as raised:
        encode(elements)
    assert f"hold {total} bytes" in str(raised.value)
    assert f"the {2**30} bytes one message may carry" in str(raised.value)
