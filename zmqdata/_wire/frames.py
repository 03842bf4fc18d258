"""The element frames codec: a batch of structures <-> ``[header, *buffers]``.

An element is a *structure*: a numpy array, a numpy scalar, a Python scalar
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``), or a ``tuple``,
``list`` or ``dict`` (``str`` keys) nesting of those. :func:`decode` gives back
exactly what :func:`encode` got: the same container types and dict key order,
numpy scalars of the same dtype, Python scalars of the same type, and arrays
with the same dtype (byte order included), shape and bits. Nothing is pickled:
structured dtypes, object arrays other than a ragged array (a non-empty 1-D
object array of 1-D arrays of one dtype, such as a batch of token lists), and
any other type are rejected.

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

Same host, a reader that asked for it: ``codec`` may be ``"shm"``: the buffer
is in the shared-memory segment the header names (``"s": name``, a file in
``/dev/shm``) and its frame holds its 8-byte little-endian offset there
(buffers packed in table order at 64-byte alignment, no overlap). The reader
maps the segment (``decode``'s ``segments``, e.g. ``_runtime.shm.claim``,
which checks the file's size before mapping); without
``segments`` such frames are refused.

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
    ["o", dtype, count, REF, REF]    a ragged array (rows only, k = 1): its
                                     count arrays' values end to end, then
                                     their count lengths as <i8; decoded as
                                     views of the values
    ["g", dtype, REF, REF]           k 1-D arrays of any lengths (a block's
                                     column, ``encode_block``): their values
                                     end to end, then their k lengths as <i8

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import msgpack

from zmqdata._wire.codec import Buffer, byte_view, validate_level
from zmqdata._wire.decoder import Claim, decode_frames
from zmqdata._wire.encoder import Encoder
from zmqdata._wire.limits import DEFAULT_LIMITS, Limits
from zmqdata._wire.schema import (
    FORMAT_VERSION,
    OFFSET_BYTES,
    SEGMENT_ALIGN,
    SHARED,
    pack_bigint,
    short,
)
from zmqdata.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT_VERSION",
    "Claim",
    "Limits",
    "SharedFrames",
    "Store",
    "decode",
    "decode_messages",
    "decode_sized",
    "encode",
    "encode_block",
    "encode_shared",
]


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
    header, buffers = _encode(elements, compression_level, meta)
    return [_pack(header), *buffers]


def encode_block(
    first: Any, columns: Sequence[Sequence[Any]], n: int
) -> list[bytes | memoryview] | None:
    """:func:`encode` of ``n`` elements shaped as ``first``, given as leaf columns.

    ``columns[j][i]`` is leaf ``j`` (in ``structure.flatten`` order) of
    element ``i``. The frames are those of :func:`encode` of the elements,
    made without a pass over each; None where that would send them as rows
    (large arrays).

    >>> import numpy as np
    >>> decode(encode_block({"x": np.int64(0)}, [np.arange(3)], 3))[0]
    [{'x': np.int64(0)}, {'x': np.int64(1)}, {'x': np.int64(2)}]
    """
    encoder = Encoder(None)
    entry = encoder.block(first, columns, n)
    if entry is None:
        return None
    header = {"v": FORMAT_VERSION, "n": n, "m": {}, **entry, "b": encoder.table}
    return [_pack(header), *encoder.frames]


@dataclass(frozen=True, slots=True)
class SharedFrames:
    """A batch whose out-of-header buffers were written to a shared segment.

    Attributes:
        segment: The segment's name.
        described: The frames for a reader that asked for shared memory: the
            header naming the segment, then each buffer's offset in it.
        inband_header: The header of the same batch sent with its buffers
            (for a reader that did not ask), which are ``spans`` of the segment.
        spans: ``(offset, nbytes)`` of each buffer in the segment.
    """

    segment: str
    described: list[bytes]
    inband_header: bytes
    spans: list[tuple[int, int]]


Store: TypeAlias = Callable[[int, list[tuple[int, memoryview]]], "str | None"]
"""Writes ``[(offset, bytes), ...]`` to a new segment of the given size and names
it, or returns None (no room): ``zmqdata._runtime.shm.store``."""


def encode_shared(
    elements: Sequence[Any], store: Store
) -> SharedFrames | list[bytes | memoryview]:
    """Encodes like :func:`encode` (uncompressed), its buffers into a shared segment.

    Returns:
        A :class:`SharedFrames`; or :func:`encode`'s frames when no buffer
        needs a frame of its own or ``store`` had no room.

    >>> import numpy as np
    >>> kept = {}
    >>> def store(size, parts):
    ...     kept["seg"] = bytearray(size)
    ...     for offset, data in parts:
    ...         kept["seg"][offset : offset + data.nbytes] = data
    ...     return "zmqdata-1-" + "0" * 32 + "-0"
    >>> shared = encode_shared([np.arange(20_000)], store)
    >>> decode(shared.described, segments=lambda name, extent: kept["seg"])[0][0][-1]
    np.int64(19999)
    """
    header, buffers = _encode(elements, None, None)
    if not buffers:
        return [_pack(header)]
    views = [byte_view(buffer) for buffer in buffers]
    spans: list[tuple[int, int]] = []
    end = 0
    for view in views:
        offset = -(-end // SEGMENT_ALIGN) * SEGMENT_ALIGN
        spans.append((offset, view.nbytes))
        end = offset + view.nbytes
    parts = [(offset, view) for (offset, _), view in zip(spans, views, strict=True)]
    name = store(end, parts)
    if name is None:
        return [_pack(header), *buffers]
    inband = _pack(header)
    header["s"] = name
    header["b"] = [[SHARED, nbytes] for _, nbytes in spans]
    offsets = [offset.to_bytes(OFFSET_BYTES, "little") for offset, _ in spans]
    return SharedFrames(name, [_pack(header), *offsets], inband, spans)


def _encode(
    elements: Sequence[Any], level: int | None, meta: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[bytes | memoryview]]:
    """The header map and the buffers of a batch."""
    if meta is not None and not isinstance(meta, Mapping):
        raise InvalidArgumentError(f"meta must be a mapping, got {type(meta).__name__}")
    items = list(elements)
    encoder = Encoder(level)
    header: dict[str, Any] = {"v": FORMAT_VERSION, "n": len(items)}
    header["m"] = dict(meta or {})
    header.update(encoder.structure(items))
    header["b"] = encoder.table
    return header, encoder.frames


def _pack(header: dict[str, Any]) -> bytes:
    try:
        packed: bytes = msgpack.packb(header, default=pack_bigint)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgumentError(f"meta cannot be serialised: {error}") from error
    return packed


def decode(
    frames: Sequence[Buffer],
    limits: Limits = DEFAULT_LIMITS,
    segments: Claim | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """Decodes the frames :func:`encode` made back into ``(elements, meta)``.

    Arrays are views of ``frames`` where possible (see the module docstring on
    memory), so keep the frames alive as long as the arrays, or copy them.

    Args:
        frames: The header then the buffers: bytes-like objects or
            ``zmq.Frame`` objects.
        limits: What the decoded message may hold (see :class:`Limits`).
        segments: How to map a shared-memory segment the header names
            (``zmqdata._runtime.shm.claim``); None refuses such frames.

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
    elements, meta, _ = decode_sized(frames, limits, segments)
    return elements, meta


def decode_sized(
    frames: Sequence[Buffer],
    limits: Limits = DEFAULT_LIMITS,
    segments: Claim | None = None,
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
    elements, meta, held, _ = _decode(frames, limits, segments)
    return elements, meta, held


def _decode(
    frames: Sequence[Buffer], limits: Limits, segments: Claim | None
) -> tuple[list[Any], dict[str, Any], int, int]:
    """:func:`decode_frames`, any error an ``InvalidArgumentError``."""
    try:
        return decode_frames(frames, limits, segments)
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
    segments: Claim | None = None,
) -> tuple[list[Any], int]:
    """Decodes several messages sent back to back, as a peer says it sent them.

    Args:
        frames: Every message's frames, one message after the other.
        sizes: The frame count of each message (a peer's claim, checked).
        count: The total element count the peer claims (checked).
        limits: What all the messages together may hold.
        segments: As for :func:`decode`.

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
            f"messages of {short(sizes)} frames claimed, {len(frames)} frames given"
        )
    elements: list[Any] = []
    nbytes, start = 0, 0
    for index, size in enumerate(sizes):
        group = frames[start : start + size]
        try:
            decoded, _, held, shared = _decode(group, limits, segments)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(
                f"message {index} of {len(sizes)}: {error}"
            ) from None
        elements.extend(decoded)
        received = sum(byte_view(frame).nbytes for frame in group)
        expanded = held - shared - received
        limits = limits.spend(held, expanded)  # what the messages left may hold
        nbytes, start = nbytes + held, start + size
    if len(elements) != count:
        raise InvalidArgumentError(
            f"{count} elements claimed, the messages hold {len(elements)}"
        )
    return elements, nbytes
