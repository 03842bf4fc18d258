"""The element frames codec: a batch of structures <-> ``[header, *buffers]``.

An element is a *structure*: a numpy array, a numpy scalar, a Python scalar
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``), or a ``tuple``,
``list`` or ``dict`` (``str`` keys) nesting of those. :func:`decode` gives back
exactly what :func:`encode` got: the same container types and dict key order,
numpy scalars of the same dtype, Python scalars of the same type, and arrays
with the same dtype (byte order included), shape and bits. Nothing is pickled:
object and structured dtypes, and any other type, are rejected.

Header layout
-------------
Frame 0 is one msgpack map::

    {"v": 1,                          # format version; others are rejected
     "n": 3,                          # element count
     "m": {...},                      # the caller's meta, returned untouched
     "c": SPEC,  or  "r": [SPEC, ...],
     "b": [[codec, nbytes], ...]}     # buffer table

Frame ``i + 1`` holds buffer ``i`` of the buffer table: ``codec`` is ``None``
or ``"zstd"`` and ``nbytes`` is its size once decompressed.

A SPEC describes a batch of ``k`` elements that share one structure: ``"c"``
(columnar) has one SPEC for all ``n`` elements, ``"r"`` (rows) one SPEC per
element, with ``k = 1``. Each leaf of a SPEC holds the column of the ``k``
values found at that place in the structure::

    ["T", [SPEC, ...]]               tuple
    ["L", [SPEC, ...]]               list
    ["D", [key, ...], [SPEC, ...]]   dict, keys in order
    ["a", dtype, shape, REF]         k arrays of `shape`: one (k, *shape) array
    ["s", dtype, REF]                k numpy scalars: one (k,) array
    ["p", type, REF]                 k Python int/float/bool: one (k,) array of
                                     <i8 / <f8 / |b1
    ["v", type, [value, ...]]        k values inline in msgpack; type is one of
                                     none bool int float str bytes str_ bytes_

``dtype`` is numpy's ``dtype.str`` (``"<f4"``, ``">i4"``, ``"|b1"``,
``"<U5"``, ``"<M8[ns]"``). A REF is either a msgpack ``bin`` holding the C-order
bytes inline (buffers under 64 KiB, up to 1 MiB of them per message) or an int
indexing the buffer table. ``int`` values outside 64 bits travel as msgpack
extension type 1 (big-endian two's complement).

Batches whose elements share their structure, dtypes and shapes, and whose
arrays are small, travel columnar: one stacked array per leaf, so 1,000 scalars
cost one buffer, not 1,000. Anything else travels as rows, where every large
array is its own frame, zero-copy. A columnar batch always has a leaf that
carries bytes for every element, so a forged ``n`` is bounded by the frames'
size.

Limits: decoding reads untrusted input, so what a header claims is checked
against what was received and against :class:`Limits` *before* anything is
allocated: the buffer table's sizes (a raw buffer must be as big as its frame, a
compressed one may expand to at most ``Limits.max_decompressed`` bytes in all,
and the whole message to ``Limits.max_bytes``), and the Python objects the
element count and the SPECs ask for (at most ``OBJECTS_PER_BYTE`` per byte
received, plus ``OBJECTS_FLOOR``), so neither a zstd bomb nor a forged count can
turn a small message into a large allocation.

Memory: :func:`encode` returns C-contiguous arrays' memory as is (a byte
memoryview, no copy) when a buffer is not compressed; other arrays are copied
once to C order. :func:`decode` returns arrays that are views of the buffer
frames (no copy): they are writable exactly when the frame memory is (a
``bytearray``, a ``zmq.Frame``), and read-only for ``bytes``, which decode does
not copy, as receivers mostly only read (``arr.copy()`` where a writable copy is
needed). Arrays from inline header bytes or from decompressed buffers are fresh
memory, always writable. Decoding :func:`encode`'s own output in-process gives
views of the original arrays.

>>> import numpy as np
>>> frames = encode([(np.int64(1), "a"), (np.int64(2), "b")], meta={"seq": 7})
>>> decode(frames)
([(np.int64(1), 'a'), (np.int64(2), 'b')], {'seq': 7})
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgpack
import numpy as np

from zmqdata._wire.codec import (
    Buffer,
    byte_view,
    decompress,
    maybe_compress,
    validate_level,
)
from zmqdata.errors import InvalidArgumentError

__all__ = [
    "FORMAT_VERSION",
    "Limits",
    "decode",
    "decode_messages",
    "decode_sized",
    "encode",
]

FORMAT_VERSION: Final = 1
INLINE_MAX: Final = 64 * 1024
"""Buffers smaller than this travel inside the header..."""
INLINE_BUDGET: Final = 1 << 20
"""...up to this many bytes per message; the rest get frames of their own."""
MAX_DEPTH: Final = 64
"""The deepest container nesting accepted."""
OBJECTS_PER_BYTE: Final = 4
"""Decoding makes at most this many Python objects (elements, containers and
leaf values) per byte received, ..."""
OBJECTS_FLOOR: Final = 1 << 16
"""... plus this many, whatever the size of the message."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one decoded message may hold, checked before anything is allocated.

    Attributes:
        max_bytes: The most bytes the header and the buffers may hold once
            decompressed.
        max_decompressed: The most bytes the compressed buffers of the message
            may decompress to, in all.
    """

    max_bytes: int = 1 << 30
    max_decompressed: int = 256 << 20


DEFAULT_LIMITS: Final = Limits()

_MAX_NDIM: Final = 64
_COLUMN_MAX_NDIM: Final = 32
_MIN_TYPED_COLUMN: Final = 16
_BIGINT_EXT: Final = 1
_ARRAY_KINDS: Final = frozenset("biufcSUmM")
_SCALAR_KINDS: Final = frozenset("biufcmM")

# Python-level leaf types, by wire name; numpy scalars decode via the converter.
_VALUE_TYPES: Final[dict[type, str]] = {
    type(None): "none",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bytes",
    np.str_: "str_",
    np.bytes_: "bytes_",
}
_WIRE_VALUES: Final[dict[str, tuple[type, Callable[[Any], Any] | None]]] = {
    "none": (type(None), None),
    "bool": (bool, None),
    "int": (int, None),
    "float": (float, None),
    "str": (str, None),
    "bytes": (bytes, None),
    "str_": (str, np.str_),
    "bytes_": (bytes, np.bytes_),
}
_TYPED_COLUMNS: Final[dict[str, np.dtype[Any]]] = {
    "int": np.dtype("<i8"),
    "float": np.dtype("<f8"),
    "bool": np.dtype("|b1"),
}
# numpy scalar types whose dtype the type alone fixes (not datetimes: units vary).
_FIXED_SCALARS: Final = frozenset(np.dtype(code).type for code in "?bBhHiIlLqQefdgFDG")

# A structure signature: ("T"|"L", children), ("D", keys, children),
# ("a", dtype, shape), ("s", dtype), or a type from _VALUE_TYPES.
_Sig: TypeAlias = "tuple[Any, ...] | type"
_Builder: TypeAlias = Callable[[Iterator[Any]], Any]


class _Unsupported(Exception):
    """An element part that cannot be encoded, and where it sits."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[object] = []


def encode(
    elements: Sequence[Any],
    *,
    compression_level: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> list[bytes | memoryview]:
    """Encodes a batch of elements as ``[header, *buffers]`` frames.

    Args:
        elements: The structures to send (see the module docstring).
        compression_level: zstd level for the out-of-header buffers, each
            compressed only if it pays off; ``None`` sends them raw, zero-copy.
        meta: The caller's own msgpack-serialisable header fields, which
            :func:`decode` returns as they are (msgpack turns tuples to lists).

    Returns:
        The msgpack header as ``bytes``, then one buffer per buffer-table entry
        (raw memory as a byte memoryview, or compressed ``bytes``).

    Raises:
        InvalidArgumentError: An unsupported type or dtype (the message names
            the element and the path in it), a bad compression level, or a
            ``meta`` msgpack cannot serialise.

    >>> frames = encode([1.5, 2.5])
    >>> len(frames), decode(frames)
    (1, ([1.5, 2.5], {}))
    """
    if compression_level is not None:
        validate_level(compression_level)
    if meta is not None and not isinstance(meta, Mapping):
        raise InvalidArgumentError(f"meta must be a mapping, got {type(meta).__name__}")
    items = list(elements)
    encoder = _Encoder(compression_level)
    header: dict[str, Any] = {"v": FORMAT_VERSION, "n": len(items)}
    header["m"] = dict(meta or {})
    header.update(encoder.structure(items))
    header["b"] = encoder.table
    try:
        packed = msgpack.packb(header, default=_pack_bigint)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgumentError(f"meta cannot be serialised: {error}") from error
    return [packed, *encoder.frames]


def decode(
    frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS
) -> tuple[list[Any], dict[str, Any]]:
    """Decodes the frames :func:`encode` made back into ``(elements, meta)``.

    Arrays are views of ``frames`` where possible (see the module docstring on
    memory), so keep the frames alive as long as the arrays, or copy them.

    Args:
        frames: The header then the buffers: bytes-like objects or
            ``zmq.Frame`` objects.
        limits: What the decoded message may hold (see :class:`Limits`).

    Returns:
        The elements, and the ``meta`` given to :func:`encode`.

    Raises:
        InvalidArgumentError: The frames are malformed in any way: garbage or
            truncated header, unknown version, wrong frame count, a buffer
            whose size does not match its dtype and shape, a bad dtype, corrupt
            compressed data; or they would decode to more than ``limits`` or
            to more objects than the bytes received allow.

    >>> decode(encode([{"x": 1}], meta={"eos": False}))
    ([{'x': 1}], {'eos': False})
    """
    elements, meta, _ = decode_sized(frames, limits)
    return elements, meta


def decode_sized(
    frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS
) -> tuple[list[Any], dict[str, Any], int]:
    """Like :func:`decode`, plus the bytes the decoded batch holds in memory.

    That is the header and every buffer once decompressed: what a receiver
    keeps alive while it holds the elements (the frames' own size understates
    it for compressed buffers).

    >>> import numpy as np
    >>> frames = encode([np.zeros(100_000, np.uint8)], compression_level=3)
    >>> sum(len(f) for f in frames) < 1_000, decode_sized(frames)[2] > 100_000
    (True, True)
    """
    try:
        return _decode(frames, limits)
    except InvalidArgumentError:
        raise
    # A safety net: validation above should leave no other error, but decode
    # reads untrusted input and promises InvalidArgumentError only.
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as error:
        raise InvalidArgumentError(
            f"malformed frames: {type(error).__name__}: {error}"
        ) from error


def decode_messages(
    frames: Sequence[Buffer],
    sizes: Sequence[int],
    count: int,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[list[Any], int]:
    """Decodes several messages sent back to back, as a peer says it sent them.

    Args:
        frames: Every message's frames, one message after the other.
        sizes: The frame count of each message (a peer's claim, checked).
        count: The total element count the peer claims (checked).
        limits: What all the messages together may hold.

    Returns:
        The elements of all messages, and the bytes they hold (as
        :func:`decode_sized`).

    Raises:
        InvalidArgumentError: ``sizes`` does not add up to the frames given,
            the messages hold other than ``count`` elements, or one of them is
            malformed or over :class:`Limits`.

    >>> frames = [*encode([1, 2]), *encode([3])]
    >>> decode_messages(frames, [1, 1], 3)[0]
    [1, 2, 3]
    """
    if not all(type(n) is int and n > 0 for n in sizes) or sum(sizes) != len(frames):
        raise InvalidArgumentError(
            f"messages of {_short(sizes)} frames claimed, {len(frames)} frames given"
        )
    elements: list[Any] = []
    nbytes, start = 0, 0
    for index, size in enumerate(sizes):
        group = frames[start : start + size]
        try:
            decoded, _, held = decode_sized(group, limits)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(
                f"message {index} of {len(sizes)}: {error}"
            ) from None
        elements.extend(decoded)
        expanded = held - sum(byte_view(frame).nbytes for frame in group)
        limits = Limits(  # what the messages left may still hold
            max_bytes=max(0, limits.max_bytes - held),
            max_decompressed=max(0, limits.max_decompressed - max(0, expanded)),
        )
        nbytes, start = nbytes + held, start + size
    if len(elements) != count:
        raise InvalidArgumentError(
            f"{count} elements claimed, the messages hold {len(elements)}"
        )
    return elements, nbytes


# --- encoding -------------------------------------------------------------------


class _Encoder:
    """Turns element signatures and leaf columns into specs and buffers."""

    def __init__(self, level: int | None) -> None:
        self._level = level
        self._inline = 0
        self.table: list[list[Any]] = []
        self.frames: list[bytes | memoryview] = []

    def structure(self, items: list[Any]) -> dict[str, Any]:
        """The header's ``"c"`` or ``"r"`` entry for ``items``."""
        fast = _fast_signature(items)
        if fast is not None:
            return {"c": self._columns(fast, iter([items]), len(items))}
        sigs, rows = _signatures(items)
        if (
            sigs
            and all(sig == sigs[0] for sig in sigs)
            and _columnar(sigs[0], len(items))
        ):
            columns: Iterable[Sequence[Any]] = zip(*rows, strict=True)
            return {"c": self._columns(sigs[0], iter(columns), len(items))}
        return {
            "r": [
                self._spec(sig, ([leaf] for leaf in row), 1)
                for sig, row in zip(sigs, rows, strict=True)
            ]
        }

    def _columns(self, sig: _Sig, columns: Iterator[Sequence[Any]], n: int) -> Any:
        """The columnar SPEC of ``n`` elements of ``sig``.

        Its buffers stay uncompressed when the batch decodes to more objects
        than ``OBJECTS_FLOOR``: a receiver refuses more objects per byte
        received than ``OBJECTS_PER_BYTE``, as it cannot tell such a message
        from a forged element count.
        """
        if n > 1 and n * _node_count(sig) > OBJECTS_FLOOR:
            self._level = None
        return self._spec(sig, columns, n)

    def _spec(self, sig: _Sig, columns: Iterator[Sequence[Any]], n: int) -> Any:
        """The SPEC for ``sig``, taking leaf columns (of ``n`` values) in order."""
        if isinstance(sig, tuple):
            tag = sig[0]
            if tag in ("T", "L"):
                return [tag, [self._spec(child, columns, n) for child in sig[1]]]
            if tag == "D":
                return [tag, list(sig[1]), [self._spec(c, columns, n) for c in sig[2]]]
        return self._leaf(sig, next(columns), n)

    def _leaf(self, sig: _Sig, values: Sequence[Any], n: int) -> list[Any]:
        """The SPEC leaf holding ``values``."""
        if not isinstance(sig, tuple):
            return self._values(sig, values, n)
        dtype: np.dtype[Any] = sig[1]
        if sig[0] == "s":
            return ["s", dtype.str, self._place(np.array(values, dtype=dtype))]
        column = values[0] if n == 1 else np.array(values, dtype=dtype)
        return ["a", dtype.str, list(sig[2]), self._place(column)]

    def _values(self, kind: type, values: Sequence[Any], n: int) -> list[Any]:
        """A ``"p"`` leaf (a typed array) if worth it, else a ``"v"`` one."""
        name = _VALUE_TYPES[kind]
        dtype = _TYPED_COLUMNS.get(name)
        if dtype is not None and n >= _MIN_TYPED_COLUMN:
            try:
                column = np.array(values, dtype=dtype)
            except OverflowError:  # an int outside int64: msgpack carries it
                pass
            else:
                return ["p", name, self._place(column)]
        return ["v", name, list(values)]

    def _place(self, array: np.ndarray[Any, Any]) -> bytes | int:
        """Puts ``array``'s bytes inline (returned) or in a frame (its index)."""
        nbytes = array.nbytes
        if nbytes < INLINE_MAX and self._inline + nbytes <= INLINE_BUDGET:
            self._inline += nbytes
            return array.tobytes()
        codec: str | None = None
        data: bytes | memoryview = byte_view(array)
        if self._level is not None:
            codec, data = maybe_compress(data, level=self._level)
        self.table.append([codec, nbytes])
        self.frames.append(data)
        return len(self.frames) - 1


def _fast_signature(items: list[Any]) -> _Sig | None:
    """The shared signature of a batch of same-typed scalars, else ``None``."""
    if not items:
        return None
    kind = type(items[0])
    if kind not in _VALUE_TYPES and kind not in _FIXED_SCALARS:
        return None
    if not all(type(item) is kind for item in items):
        return None
    return kind if kind in _VALUE_TYPES else ("s", items[0].dtype)


def _signatures(items: list[Any]) -> tuple[list[_Sig], list[list[Any]]]:
    """Each element's signature, and its leaves in depth-first order."""
    sigs: list[_Sig] = []
    rows: list[list[Any]] = []
    try:
        for item in items:
            leaves: list[Any] = []
            sigs.append(_signature(item, leaves, 0))
            rows.append(leaves)
    except _Unsupported as error:
        raise _element_error(len(sigs), error) from None
    return sigs, rows


def _element_error(index: int, error: _Unsupported) -> InvalidArgumentError:
    """The error for element ``index``, naming the path in it."""
    path = "".join(f"[{key!r}]" for key in error.path)
    return InvalidArgumentError(f"cannot encode element {index}{path}: {error.reason}")


def _signature(value: object, leaves: list[Any], depth: int) -> _Sig:
    """``value``'s signature; appends its leaves to ``leaves``."""
    kind = type(value)
    if kind in _VALUE_TYPES:
        leaves.append(value)
        return kind
    if type(value) is np.ndarray:
        if value.dtype.kind not in _ARRAY_KINDS:
            raise _Unsupported(_bad_dtype(value.dtype, "array"))
        leaves.append(value)
        return ("a", value.dtype, value.shape)
    if kind in _FIXED_SCALARS and isinstance(value, np.generic):
        leaves.append(value)
        return ("s", value.dtype)
    if type(value) is tuple or type(value) is list:
        return ("T" if kind is tuple else "L", _children(value, leaves, depth))
    if type(value) is dict:
        bad = next((key for key in value if type(key) is not str), None)
        if bad is not None:
            raise _Unsupported(f"dict key {bad!r} is not a str")
        return ("D", tuple(value), _children(value, leaves, depth))
    return _rare_signature(value, leaves)


def _children(
    container: tuple[Any, ...] | list[Any] | dict[str, Any],
    leaves: list[Any],
    depth: int,
) -> tuple[_Sig, ...]:
    """The signatures of a container's children."""
    if depth >= MAX_DEPTH:
        raise _Unsupported(f"structure nested deeper than {MAX_DEPTH} levels")
    values = container.values() if isinstance(container, dict) else container
    sigs: list[_Sig] = []
    try:
        for child in values:
            sigs.append(_signature(child, leaves, depth + 1))
    except _Unsupported as error:
        keys = list(container) if isinstance(container, dict) else None
        error.path.insert(0, len(sigs) if keys is None else keys[len(sigs)])
        raise
    return tuple(sigs)


def _rare_signature(value: object, leaves: list[Any]) -> _Sig:
    """The signature of datetime scalars; rejects every other type."""
    if isinstance(value, np.generic):
        if value.dtype.kind not in _SCALAR_KINDS:
            raise _Unsupported(_bad_dtype(value.dtype, "numpy scalar"))
        leaves.append(value)
        return ("s", value.dtype)
    kind = type(value)
    if isinstance(value, np.ndarray):
        raise _Unsupported(
            f"numpy array subclass {kind.__qualname__} is not supported;"
            " pass np.asarray(...)"
        )
    raise _Unsupported(
        f"unsupported type {kind.__module__}.{kind.__qualname__} (supported:"
        " numpy arrays and scalars, None, bool, int, float, str, bytes, and"
        " tuple / list / dict nestings of those)"
    )


def _bad_dtype(dtype: np.dtype[Any], what: str) -> str:
    return (
        f"{what} dtype {dtype} ({dtype.str!r}) is not supported (no object or"
        " structured dtypes on the wire: nothing is pickled)"
    )


def _columnar(sig: _Sig, n: int) -> bool:
    """Whether a batch of ``n`` elements of ``sig`` should travel columnar.

    Not when an array leaf is big (stacking would copy it; rows send it
    zero-copy), nor when elements carry no bytes at all (then ``n`` would not be
    bounded by the message size), nor when they carry too few bytes for their
    objects (a receiver would refuse the batch; rows list every object).
    """
    min_bytes = 0
    for leaf in _leaf_signatures(sig):
        if isinstance(leaf, tuple) and leaf[0] == "a":
            shape: tuple[int, ...] = leaf[2]
            nbytes = math.prod(shape) * leaf[1].itemsize
            if nbytes >= INLINE_MAX or len(shape) >= _COLUMN_MAX_NDIM:
                return False
            min_bytes += nbytes
        else:
            min_bytes += 1
    if min_bytes == 0:
        return False
    return n <= 1 or n * _node_count(sig) <= (
        OBJECTS_PER_BYTE * n * min_bytes + OBJECTS_FLOOR
    )


def _node_count(sig: _Sig) -> int:
    """The objects one element of ``sig`` decodes to (as ``_count_nodes``)."""
    if isinstance(sig, tuple) and sig[0] in ("T", "L", "D"):
        return 1 + sum(_node_count(child) for child in sig[-1])
    return 1


def _leaf_signatures(sig: _Sig) -> Iterator[_Sig]:
    if isinstance(sig, tuple) and sig[0] in ("T", "L", "D"):
        for child in sig[-1]:
            yield from _leaf_signatures(child)
    else:
        yield sig


def _pack_bigint(value: object) -> msgpack.ExtType:
    """The msgpack ``default`` hook: ints beyond 64 bits as extension type 1."""
    if type(value) is not int:
        raise TypeError(f"cannot serialise {type(value).__qualname__}")
    size = value.bit_length() // 8 + 1
    return msgpack.ExtType(_BIGINT_EXT, value.to_bytes(size, "big", signed=True))


# --- decoding -------------------------------------------------------------------


def _decode(
    frames: Sequence[Buffer], limits: Limits
) -> tuple[list[Any], dict[str, Any], int]:
    views = [byte_view(frame) for frame in frames]
    if not views:
        raise InvalidArgumentError("no frames: expected at least a header frame")
    head, rest = views[0].nbytes, views[1:]
    if head > limits.max_bytes:
        raise InvalidArgumentError(
            f"header of {head} bytes is over the cap of {limits.max_bytes}"
        )
    header = _unpack_header(views[0])
    n = _field(header, "n", int)
    if n < 0:
        raise InvalidArgumentError(f"header element count is negative: {n}")
    meta = _field(header, "m", dict)
    table = _field(header, "b", list)
    nbytes = head + _buffer_table(table, rest, limits.max_bytes - head, limits)
    if ("c" in header) == ("r" in header):
        raise InvalidArgumentError('header needs exactly one of "c" and "r"')
    if "c" in header:
        # Every columnar element carries at least a byte (encode makes sure),
        # which bounds the work a forged count can cause...
        if n > nbytes:
            raise InvalidArgumentError(f"{n} elements cannot fit in these frames")
        # ... and the objects they make are bounded by the bytes received. (A
        # row's SPEC nodes take 3 header bytes or more each: rows need no check.)
        if n > 1:
            received = head + sum(view.nbytes for view in rest)
            _check_objects(n, n * _count_nodes(header["c"], 0), received)
    else:
        rows = _field(header, "r", list)
        if len(rows) != n:
            raise InvalidArgumentError(f"header has {len(rows)} rows for {n} elements")
    decoder = _Decoder(_load_buffers(table, rest, limits))
    if "c" in header:
        elements = decoder.batch(header["c"], n)
    else:
        elements = [decoder.batch(row, 1)[0] for row in rows]
    decoder.check_all_used()
    return elements, meta, nbytes


def _unpack_header(view: memoryview) -> dict[str, Any]:
    try:
        header = msgpack.unpackb(
            view, raw=False, strict_map_key=False, ext_hook=_unpack_ext
        )
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise InvalidArgumentError(f"header is not valid msgpack: {error}") from error
    if not isinstance(header, dict):
        raise InvalidArgumentError(
            f"header must be a msgpack map, got {type(header).__name__}"
        )
    version = header.get("v")
    if type(version) is not int or version != FORMAT_VERSION:
        raise InvalidArgumentError(
            f"unsupported header version {version!r} (this build reads"
            f" version {FORMAT_VERSION})"
        )
    return header


def _unpack_ext(code: int, data: bytes) -> int:
    if code != _BIGINT_EXT:
        raise ValueError(f"unknown msgpack extension type {code}")
    return int.from_bytes(data, "big", signed=True)


def _field(container: Mapping[str, Any] | list[Any], key: Any, kind: type) -> Any:
    """``container[key]``, which must be exactly of type ``kind``."""
    try:
        value = container[key]
    except (KeyError, IndexError):
        raise InvalidArgumentError(f"header is missing field {key!r}") from None
    if type(value) is not kind:
        raise InvalidArgumentError(
            f"header field {key!r} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _buffer_table(
    table: list[Any], views: list[memoryview], room: int, limits: Limits
) -> int:
    """Checks the buffer table's entries, and their sizes against ``limits``.

    Nothing is allocated: the sizes are the header's claims (checked against
    the frames when they are decoded).

    Args:
        table: The header's ``[[codec, nbytes], ...]``.
        views: The buffer frames.
        room: The bytes ``limits.max_bytes`` leaves for the buffers.
        limits: The caps.

    Returns:
        The bytes the buffers will hold once decompressed.
    """
    if len(table) != len(views):
        raise InvalidArgumentError(
            f"header lists {len(table)} buffers but {len(views)} frames follow it"
        )
    total = expanded = 0
    for index, entry in enumerate(table):
        if type(entry) is not list or len(entry) != 2:
            raise InvalidArgumentError(f"buffer table entry {index} is malformed")
        codec, nbytes = entry
        if type(nbytes) is not int or nbytes < 0:
            raise InvalidArgumentError(f"buffer {index} has a bad size {nbytes!r}")
        if codec is not None:
            if type(codec) is not str:
                raise InvalidArgumentError(f"buffer {index} has a bad codec {codec!r}")
            expanded += nbytes
        total += nbytes
    if expanded > limits.max_decompressed:
        raise InvalidArgumentError(
            f"compressed buffers declare {expanded} bytes once decompressed,"
            f" over the cap of {limits.max_decompressed}"
        )
    if total > room:
        raise InvalidArgumentError(
            f"buffers declare {total} bytes, over the cap of {limits.max_bytes}"
            " with the header"
        )
    return total


def _count_nodes(spec: Any, depth: int) -> int:
    """The SPEC's node count: the objects one element of it costs.

    Malformed nodes count as leaves, for :meth:`_Decoder.batch` to reject.
    """
    if type(spec) is not list or len(spec) < 2 or spec[0] not in ("T", "L", "D"):
        return 1
    if depth >= MAX_DEPTH:
        raise InvalidArgumentError(f"SPEC nested deeper than {MAX_DEPTH} levels")
    children = spec[-1]
    if type(children) is not list:
        return 1
    return 1 + sum(_count_nodes(child, depth + 1) for child in children)


def _check_objects(n: int, objects: int, received: int) -> None:
    """Refuses a message that would build more objects than its bytes allow."""
    allowed = OBJECTS_PER_BYTE * received + OBJECTS_FLOOR
    if objects > allowed:
        raise InvalidArgumentError(
            f"{n} elements of {objects} objects in all from {received} bytes"
            f" received: over the limit of {allowed} (a forged element count?)"
        )


def _load_buffers(
    table: list[Any], views: list[memoryview], limits: Limits
) -> list[memoryview]:
    """The buffers of the buffer table, decompressed and size-checked."""
    buffers = []
    cap = limits.max_decompressed
    for index, ((codec, nbytes), view) in enumerate(zip(table, views, strict=True)):
        try:
            buffers.append(
                byte_view(decompress(codec, view, size=nbytes, max_size=cap))
            )
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"buffer {index}: {error}") from None
    return buffers


class _Decoder:
    """Rebuilds elements from SPECs, taking each buffer exactly once."""

    def __init__(self, buffers: list[memoryview]) -> None:
        self._buffers = buffers
        self._used = [False] * len(buffers)

    def check_all_used(self) -> None:
        """Raises if a buffer frame was never referenced."""
        if not all(self._used):
            raise InvalidArgumentError(
                f"buffer {self._used.index(False)} is not referenced by the header"
            )

    def batch(self, spec: Any, n: int) -> list[Any]:
        """The ``n`` elements a SPEC describes."""
        columns: list[list[Any]] = []
        build = self._plan(spec, n, columns, 0)
        if build is None:
            return columns[0]
        if spec[0] == "T" and columns and all(map(_is_leaf, spec[1])):
            return list(zip(*columns, strict=True))
        rows = zip(*columns, strict=True) if columns else itertools.repeat((), n)
        return [build(iter(row)) for row in rows]

    def _plan(
        self, spec: Any, n: int, columns: list[list[Any]], depth: int
    ) -> _Builder | None:
        """Decodes a SPEC's leaf columns into ``columns``, in order.

        Returns:
            How to assemble one element from an iterator over its leaf values,
            or ``None`` when the SPEC is a bare leaf.
        """
        if type(spec) is not list or not spec or type(spec[0]) is not str:
            raise InvalidArgumentError(f"malformed SPEC node {_short(spec)}")
        tag = spec[0]
        if tag not in ("T", "L", "D"):
            columns.append(self._leaf(spec, n))
            return None
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"SPEC nested deeper than {MAX_DEPTH} levels")
        _expect_len(spec, 3 if tag == "D" else 2)
        children = [
            self._plan(child, n, columns, depth + 1) or next
            for child in _field(spec, len(spec) - 1, list)
        ]
        if tag == "T":
            return lambda leaves: tuple([child(leaves) for child in children])
        if tag == "L":
            return lambda leaves: [child(leaves) for child in children]
        keys = _field(spec, 1, list)
        if len(keys) != len(children) or not all(type(k) is str for k in keys):
            raise InvalidArgumentError(f"malformed dict SPEC keys {_short(keys)}")
        pairs = list(zip(keys, children, strict=True))
        return lambda leaves: {key: child(leaves) for key, child in pairs}

    def _leaf(self, spec: list[Any], n: int) -> list[Any]:
        """The ``n`` values of a leaf SPEC."""
        tag = spec[0]
        if tag == "a":
            _expect_len(spec, 4)
            dtype = _dtype(spec[1], _ARRAY_KINDS)
            shape = _shape(spec[2])
            flat = self._array(spec[3], dtype, n * math.prod(shape), writable=True)
            if n == 1:
                return [flat.reshape(shape)]
            column = flat.reshape((n, *shape))
            return list(column) if shape else [column[i, ...] for i in range(n)]
        if tag == "s":
            _expect_len(spec, 3)
            dtype = _dtype(spec[1], _SCALAR_KINDS)
            return list(self._array(spec[2], dtype, n, writable=False))
        if tag == "p":
            _expect_len(spec, 3)
            typed = _TYPED_COLUMNS.get(spec[1]) if type(spec[1]) is str else None
            if typed is None:
                raise InvalidArgumentError(f"unknown typed column {_short(spec[1])}")
            values: list[Any] = self._array(spec[2], typed, n, writable=False).tolist()
            return values
        if tag == "v":
            _expect_len(spec, 3)
            return _values(spec[1], spec[2], n)
        raise InvalidArgumentError(f"unknown SPEC tag {tag!r}")

    def _array(
        self, ref: object, dtype: np.dtype[Any], count: int, *, writable: bool
    ) -> np.ndarray[Any, Any]:
        """The flat array of ``count`` items REF points to."""
        data: bytes | bytearray | memoryview
        if type(ref) is bytes:
            data = bytearray(ref) if writable else ref
        elif type(ref) is int and 0 <= ref < len(self._buffers):
            if self._used[ref]:
                raise InvalidArgumentError(f"buffer {ref} is referenced twice")
            self._used[ref] = True
            data = self._buffers[ref]
        else:
            raise InvalidArgumentError(f"bad buffer reference {_short(ref)}")
        if len(data) != count * dtype.itemsize:
            raise InvalidArgumentError(
                f"buffer holds {len(data)} bytes but {count} x {dtype.str} need"
                f" {count * dtype.itemsize}"
            )
        return np.frombuffer(data, dtype=dtype)


def _is_leaf(spec: list[Any]) -> bool:
    """Whether a validated SPEC node is a leaf."""
    return spec[0] not in ("T", "L", "D")


def _values(name: object, values: object, n: int) -> list[Any]:
    """The ``n`` values of a ``"v"`` leaf, type-checked."""
    if type(name) is not str or name not in _WIRE_VALUES:
        raise InvalidArgumentError(f"unknown value type {_short(name)}")
    if type(values) is not list or len(values) != n:
        raise InvalidArgumentError(f"value column of {name} must list {n} values")
    kind, convert = _WIRE_VALUES[name]
    if not all(type(value) is kind for value in values):
        raise InvalidArgumentError(f"value column of {name} holds other types")
    return values if convert is None else [convert(value) for value in values]


def _dtype(text: object, kinds: frozenset[str]) -> np.dtype[Any]:
    """The dtype a header names, which must be canonical and of ``kinds``."""
    if type(text) is not str or len(text) > 32:
        raise InvalidArgumentError(f"bad dtype {_short(text)}")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, SyntaxError) as error:
        raise InvalidArgumentError(f"bad dtype {text!r}: {error}") from None
    if dtype.str != text or dtype.kind not in kinds or dtype.itemsize == 0:
        raise InvalidArgumentError(f"dtype {text!r} is not allowed here")
    return dtype


def _shape(value: object) -> tuple[int, ...]:
    if (
        type(value) is not list
        or len(value) > _MAX_NDIM
        or not all(type(dim) is int and 0 <= dim < 1 << 62 for dim in value)
    ):
        raise InvalidArgumentError(f"bad shape {_short(value)}")
    return tuple(value)


def _expect_len(spec: list[Any], length: int) -> None:
    if len(spec) != length:
        raise InvalidArgumentError(
            f"SPEC node {spec[0]!r} needs {length} fields, got {len(spec)}"
        )


def _short(value: object) -> str:
    """``repr(value)``, cut short for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
