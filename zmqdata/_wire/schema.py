"""The frames header's vocabulary: its version, tags, leaf types and sizes.

What :mod:`zmqdata._wire.encoder` writes and :mod:`zmqdata._wire.decoder`
reads; the layout itself is described in :mod:`zmqdata._wire.frames`.

>>> unpack_ext(BIGINT_EXT, pack_bigint(1 << 70).data) == 1 << 70
True
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import msgpack
import numpy as np

FORMAT_VERSION: Final = 1
INLINE_MAX: Final = 64 * 1024
"""Buffers smaller than this travel inside the header..."""
INLINE_BUDGET: Final = 1 << 20
"""...up to this many bytes per message; the rest get frames of their own."""
MAX_DEPTH: Final = 64
"""The deepest container nesting accepted."""
MAX_NDIM: Final = 64
"""The most dimensions an array may have."""
COLUMN_MAX_NDIM: Final = 32
"""Arrays of this many dimensions or more travel as rows (a column adds one)."""
MIN_TYPED_COLUMN: Final = 16
"""Python int/float/bool columns this long travel as a typed array (``"p"``)."""
BIGINT_EXT: Final = 1
"""The msgpack extension type of ints outside 64 bits."""
CONTAINERS: Final = ("T", "L", "D")
"""The SPEC tags of tuples, lists and dicts; every other tag is a leaf."""
SHARED: Final = "shm"
"""The buffer-table codec of a buffer in a shared-memory segment (same host)."""
SEGMENT_NAME: Final = re.compile(r"zmqdata-[0-9]{1,10}-[0-9a-f]{32}-[0-9]{1,20}")
"""What a segment name must fully match: a file name directly in /dev/shm."""
SEGMENT_ALIGN: Final = 64
"""Buffers start at multiples of this in a segment."""
OFFSET_BYTES: Final = 8
"""A shared buffer's frame: its offset in the segment, little-endian."""
ARRAY_KINDS: Final = frozenset("biufcSUmM")
SCALAR_KINDS: Final = frozenset("biufcmM")

VALUE_TYPES: Final[dict[type, str]] = {
    type(None): "none",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bytes",
    np.str_: "str_",
    np.bytes_: "bytes_",
}
"""Python-level leaf types, by wire name."""
WIRE_VALUES: Final[dict[str, tuple[type, Callable[[Any], Any] | None]]] = {
    "none": (type(None), None),
    "bool": (bool, None),
    "int": (int, None),
    "float": (float, None),
    "str": (str, None),
    "bytes": (bytes, None),
    "str_": (str, np.str_),
    "bytes_": (bytes, np.bytes_),
}
"""By wire name: the type msgpack gives back, and the converter of numpy ones."""
TYPED_COLUMNS: Final[dict[str, np.dtype[Any]]] = {
    "int": np.dtype("<i8"),
    "float": np.dtype("<f8"),
    "bool": np.dtype("|b1"),
}
FIXED_SCALARS: Final = frozenset(np.dtype(code).type for code in "?bBhHiIlLqQefdgFDG")
"""numpy scalar types whose dtype the type alone fixes (not datetimes: units vary)."""


def pack_bigint(value: object) -> msgpack.ExtType:
    """The msgpack ``default`` hook: ints beyond 64 bits as extension type 1."""
    if type(value) is not int:
        raise TypeError(f"cannot serialise {type(value).__qualname__}")
    size = value.bit_length() // 8 + 1
    return msgpack.ExtType(BIGINT_EXT, value.to_bytes(size, "big", signed=True))


def unpack_ext(code: int, data: bytes) -> int:
    """The msgpack ``ext_hook``: undoes :func:`pack_bigint`."""
    if code != BIGINT_EXT:
        raise ValueError(f"unknown msgpack extension type {code}")
    return int.from_bytes(data, "big", signed=True)


def short(value: object) -> str:
    """``repr(value)``, cut short for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
