"""Record formats, public helpers: ``parse_example`` for ``tf.train.Example``.

>>> from zmqdata._dataset.ops.tfrecord import write
>>> record = bytes.fromhex("0a170a150a036e756d120e1a0c0a0a0102030405060708090a")
>>> parse_example(record)["num"]
array([ 1,  2,  3,  4,  5,  6,  7,  8,  9, 10])
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zmqdata.errors import InvalidArgumentError

__all__ = ["parse_example"]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise InvalidArgumentError("truncated varint in a tf.train.Example")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise InvalidArgumentError("varint too long in a tf.train.Example")


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """``(field number, wire type, value)`` of a protobuf message's fields."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, wire, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise InvalidArgumentError("truncated field in a tf.train.Example")
            yield number, wire, data[at : at + size]
            at += size
        elif wire == 5:
            yield number, wire, data[at : at + 4]
            at += 4
        elif wire == 1:
            yield number, wire, data[at : at + 8]
            at += 8
        else:
            raise InvalidArgumentError(f"wire type {wire} in a tf.train.Example")


def _bytes_list(body: bytes) -> np.ndarray:
    """A ``BytesList``'s values: an object array of ``bytes``."""
    values = [v for n, _, v in _fields(body) if n == 1]
    return np.array(values, dtype=object)


def _float_list(body: bytes) -> np.ndarray:
    """A ``FloatList``'s values: a float32 array."""
    floats = bytearray()
    for n, _, v in _fields(body):
        if n == 1 and isinstance(v, bytes):
            floats += v  # packed (wire 2) or one value (wire 5): raw LE float32
    return np.frombuffer(bytes(floats), dtype="<f4").astype(np.float32)


def _int64_list(body: bytes) -> np.ndarray:
    """An ``Int64List``'s values (packed or one by one): an int64 array."""
    ints: list[int] = []
    for n, wire, v in _fields(body):
        if n != 1:
            continue
        if wire == 0:
            ints.append(int(v))
        else:
            assert isinstance(v, bytes)
            ints += _packed_varints(v)
    return np.array(ints, dtype=np.uint64).astype(np.int64)


def _packed_varints(data: bytes) -> list[int]:
    """The varints packed one after another in ``data``."""
    values = []
    at = 0
    while at < len(data):
        value, at = _varint(data, at)
        values.append(value)
    return values


_LISTS = {1: _bytes_list, 2: _float_list, 3: _int64_list}
"""A ``Feature``'s field numbers and the decoders of their lists."""


def _feature(data: bytes) -> np.ndarray:
    """A ``Feature``: bytes_list (1), float_list (2) or int64_list (3)."""
    for kind, _, body in _fields(data):
        assert isinstance(body, bytes)
        decode = _LISTS.get(kind)
        if decode is not None:
            return decode(body)
    return np.array([], dtype=object)


def parse_example(record: bytes) -> dict[str, np.ndarray]:
    """A serialized ``tf.train.Example`` as ``{name: numpy array}``, no TensorFlow.

    ``bytes_list`` features become object arrays of ``bytes``, ``float_list``
    float32 arrays and ``int64_list`` int64 arrays (packed or not). Malformed
    input raises ``InvalidArgumentError``. Hand-written (protobuf's wire format,
    60 lines) so that reading TFRecords needs no TensorFlow nor protobuf runtime.
    """
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(f"parse_example takes bytes, got {type(record).__name__}")
    data = bytes(record)
    out: dict[str, np.ndarray] = {}
    for number, _, features in _fields(data):
        if number == 1 and isinstance(features, bytes):
            for name, value in _entries(features):
                out[name] = _feature(value)
    return out


def _entries(features: bytes) -> Iterator[tuple[str, bytes]]:
    """``(name, Feature bytes)`` of each map entry of a ``Features`` message."""
    for number, _, entry in _fields(features):
        if number == 1 and isinstance(entry, bytes):
            yield _entry(entry)


def _entry(entry: bytes) -> tuple[str, bytes]:
    """A ``Features`` map entry's key (field 1) and ``Feature`` value (field 2)."""
    name, value = "", b""
    for n, _, v in _fields(entry):
        if n == 1 and isinstance(v, bytes):
            name = v.decode("utf-8", "replace")
        elif n == 2 and isinstance(v, bytes):
            value = v
    return name, value
