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


def _feature(data: bytes) -> np.ndarray:
    """A ``Feature``: bytes_list (1), float_list (2) or int64_list (3)."""
    for kind, _, body in _fields(data):
        assert isinstance(body, bytes)
        if kind == 1:
            values = [v for n, _, v in _fields(body) if n == 1]
            return np.array(values, dtype=object)
        if kind == 2:
            floats = bytearray()
            for n, _, v in _fields(body):
                if n == 1 and isinstance(v, bytes):
                    floats += v  # packed (wire 2) or one value (wire 5): raw LE float32
            return np.frombuffer(bytes(floats), dtype="<f4").astype(np.float32)
        if kind == 3:
            ints: list[int] = []
            for n, wire, v in _fields(body):
                if n != 1:
                    continue
                if wire == 0:
                    ints.append(int(v))
                else:
                    assert isinstance(v, bytes)
                    at = 0
                    while at < len(v):
                        value, at = _varint(v, at)
                        ints.append(value)
            return np.array(ints, dtype=np.uint64).astype(np.int64)
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
        if number != 1 or not isinstance(features, bytes):
            continue
        for entry_number, _, entry in _fields(features):
            if entry_number != 1 or not isinstance(entry, bytes):
                continue
            name, value = "", b""
            for n, _, v in _fields(entry):
                if n == 1 and isinstance(v, bytes):
                    name = v.decode("utf-8", "replace")
                elif n == 2 and isinstance(v, bytes):
                    value = v
            out[name] = _feature(value)
    return out
