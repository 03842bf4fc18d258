"""A frames header and its buffers back to elements, validating every claim.

The layout is described in :mod:`zmqdata._wire.frames`; the sizes and counts a
header claims are checked by :mod:`zmqdata._wire.limits` before anything is
allocated.

>>> decode_frames([msgpack.packb({"v": 1, "n": 0, "m": {}})], Limits())
Traceback (most recent call last):
...
zmqdata.errors.InvalidArgumentError: header is missing field 'b'
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import msgpack
import numpy as np

from zmqdata._wire.budget import BudgetSpent
from zmqdata._wire.codec import Buffer, byte_view, decompress
from zmqdata._wire.limits import (
    HEADER_BYTES_FLOOR,
    HEADER_BYTES_PER_BYTE,
    OBJECTS_FLOOR,
    OBJECTS_PER_BYTE,
    Limits,
    check_buffer_table,
    check_objects,
    count_nodes,
    header_budget,
)
from zmqdata._wire.schema import (
    ARRAY_KINDS,
    CONTAINERS,
    FORMAT_VERSION,
    MAX_DEPTH,
    MAX_NDIM,
    OFFSET_BYTES,
    SCALAR_KINDS,
    SEGMENT_ALIGN,
    SEGMENT_NAME,
    SHARED,
    TYPED_COLUMNS,
    WIRE_VALUES,
    short,
    unpack_ext,
)
from zmqdata.errors import InvalidArgumentError

_Builder: TypeAlias = Callable[[Iterator[Any]], Any]
Claim: TypeAlias = Callable[[str, int], Buffer]
"""Maps shared-memory segment ``name``, of at least ``extent`` bytes (a reader's
``zmqdata._runtime.shm.claim``); raises ``InvalidArgumentError``."""


def decode_frames(
    frames: Sequence[Buffer], limits: Limits, segments: Claim | None = None
) -> tuple[list[Any], dict[str, Any], int, int]:
    """``(elements, meta, bytes held, of them in shared memory)`` from frames.

    ``segments`` claims the shared-memory segment a header names; without it
    (a reader that did not ask for shared memory) such a header is refused.

    Raises:
        InvalidArgumentError: Malformed frames, or frames over ``limits``.
    """
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
    nbytes = head + check_buffer_table(
        table, len(rest), limits.max_bytes - head, limits
    )
    columns, rows = _structure(header, n, nbytes, views)
    shared = _shared_spans(header, table, rest, segments is not None)
    buffers = _load_buffers(table, rest, limits, shared)
    if shared:
        assert segments is not None
        _claim(header["s"], shared, buffers, segments)
    received = sum(view.nbytes for view in views)
    decoder = _Decoder(buffers, OBJECTS_PER_BYTE * received + OBJECTS_FLOOR)
    if rows is None:
        elements = decoder.batch(columns, n)
    else:
        elements = [decoder.batch(row, 1)[0] for row in rows]
    decoder.check_all_used()
    return elements, meta, nbytes, sum(size for _, size in shared.values())


def _structure(
    header: dict[str, Any], n: int, nbytes: int, views: list[memoryview]
) -> tuple[Any, list[Any] | None]:
    """The header's columnar SPEC, or its rows (then the SPEC is ``None``).

    Args:
        header: The unpacked header.
        n: Its element count.
        nbytes: The bytes the message holds once decompressed.
        views: The frames received.
    """
    if ("c" in header) == ("r" in header):
        raise InvalidArgumentError('header needs exactly one of "c" and "r"')
    if "r" in header:
        # A row's SPEC nodes take 3 header bytes or more each: no object check.
        rows = _field(header, "r", list)
        if len(rows) != n:
            raise InvalidArgumentError(f"header has {len(rows)} rows for {n} elements")
        return None, rows
    # Every columnar element carries at least a byte (encode makes sure),
    # which bounds the work a forged count can cause...
    if n > nbytes:
        raise InvalidArgumentError(f"{n} elements cannot fit in these frames")
    # ... and the objects they make are bounded by the bytes received.
    if n > 1:
        received = sum(view.nbytes for view in views)
        check_objects(n, n * count_nodes(header["c"], 0), received)
    return header["c"], None


def _unpack_header(view: memoryview) -> dict[str, Any]:
    try:
        header = msgpack.unpackb(
            view,
            raw=False,
            strict_map_key=False,
            ext_hook=unpack_ext,
            **header_budget(view.nbytes),
        )
    except BudgetSpent as error:
        raise InvalidArgumentError(
            f"header of {view.nbytes} bytes {error} (HEADER_BYTES_PER_BYTE="
            f"{HEADER_BYTES_PER_BYTE} per byte plus {HEADER_BYTES_FLOOR}): refused"
        ) from None
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


def _shared_spans(
    header: dict[str, Any], table: list[Any], views: list[memoryview], asked: bool
) -> dict[int, tuple[int, int]]:
    """``{buffer index: (offset, nbytes)}`` of the buffers in a shared segment.

    Their frames hold their offsets; the spans must not overlap.
    """
    spans = {
        index: nbytes for index, (codec, nbytes) in enumerate(table) if codec == SHARED
    }
    if not spans:
        if "s" in header:
            raise InvalidArgumentError("header names a segment but no buffer is in it")
        return {}
    if not asked:
        raise InvalidArgumentError(
            f"buffer {min(spans)} is in shared memory, which this reader did not"
            " ask for"
        )
    name = header.get("s")
    if type(name) is not str or not SEGMENT_NAME.fullmatch(name):
        raise InvalidArgumentError(f"bad shared-memory segment name {short(name)}")
    found = {
        index: (_shared_offset(index, views[index]), nbytes)
        for index, nbytes in spans.items()
    }
    _check_packed(found, spans)
    return found


def _shared_offset(index: int, view: memoryview) -> int:
    """The offset in its segment of shared buffer ``index``, from its frame."""
    if view.nbytes != OFFSET_BYTES:
        raise InvalidArgumentError(
            f"buffer {index}: a shared buffer's frame holds its"
            f" {OFFSET_BYTES}-byte offset, got {view.nbytes} bytes"
        )
    return int.from_bytes(view, "little")


def _check_packed(found: dict[int, tuple[int, int]], spans: dict[int, int]) -> None:
    """Raises if the shared buffers overlap or span more than the encoder packs."""
    end = 0
    for offset, nbytes in sorted(found.values()):
        if offset < end:
            raise InvalidArgumentError("shared buffers overlap in their segment")
        end = offset + nbytes
    # Packed as the encoder packs them: a segment maps no more than it holds.
    room = sum(spans.values()) + SEGMENT_ALIGN * len(spans)
    if end > room:
        raise InvalidArgumentError(
            f"shared buffers of {sum(spans.values())} bytes span {end} bytes"
        )


def _claim(
    name: str,
    spans: dict[int, tuple[int, int]],
    buffers: list[memoryview],
    segments: Claim,
) -> None:
    """Maps the segment and puts the shared buffers' views in ``buffers``."""
    extent = max(offset + nbytes for offset, nbytes in spans.values())
    if extent == 0:
        raise InvalidArgumentError("a shared segment of 0 bytes")
    mapping = byte_view(segments(name, extent))
    for index, (offset, nbytes) in spans.items():
        buffers[index] = mapping[offset : offset + nbytes]


def _load_buffers(
    table: list[Any],
    views: list[memoryview],
    limits: Limits,
    shared: dict[int, tuple[int, int]],
) -> list[memoryview]:
    """The buffers of the buffer table, decompressed and size-checked.

    Shared buffers are left as their (offset) frames, for ``_claim`` to map.
    """
    buffers = []
    cap = limits.max_decompressed
    for index, ((codec, nbytes), view) in enumerate(zip(table, views, strict=True)):
        if index in shared:
            buffers.append(view)
            continue
        try:
            buffers.append(
                byte_view(decompress(codec, view, size=nbytes, max_size=cap))
            )
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"buffer {index}: {error}") from None
    return buffers


class _Decoder:
    """Rebuilds elements from SPECs, taking each buffer exactly once."""

    def __init__(self, buffers: list[memoryview], objects: int) -> None:
        self._buffers = buffers
        self._used = [False] * len(buffers)
        self._objects = objects
        """The arrays ragged leaves may still make (bounded by the bytes received)."""

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
        if spec[0] == "D" and columns and all(map(_is_leaf, spec[2])):
            return _table_rows(spec[1], columns, n)
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
            raise InvalidArgumentError(f"malformed SPEC node {short(spec)}")
        if spec[0] not in CONTAINERS:
            columns.append(self._leaf(spec, n))
            return None
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"SPEC nested deeper than {MAX_DEPTH} levels")
        _expect_len(spec, 3 if spec[0] == "D" else 2)
        children = [
            self._plan(child, n, columns, depth + 1) or next
            for child in _field(spec, len(spec) - 1, list)
        ]
        return _builder(spec, children)

    def _leaf(self, spec: list[Any], n: int) -> list[Any]:
        """The ``n`` values of a leaf SPEC."""
        tag = spec[0]
        if tag == "a":
            _expect_len(spec, 4)
            dtype = _dtype(spec[1], ARRAY_KINDS)
            shape = _shape(spec[2])
            flat = self._array(spec[3], dtype, n * math.prod(shape), writable=True)
            if n == 1:
                return [flat.reshape(shape)]
            column = flat.reshape((n, *shape))
            return list(column) if shape else [column[i, ...] for i in range(n)]
        if tag == "s":
            _expect_len(spec, 3)
            dtype = _dtype(spec[1], SCALAR_KINDS)
            return list(self._array(spec[2], dtype, n, writable=False))
        if tag == "p":
            _expect_len(spec, 3)
            typed = TYPED_COLUMNS.get(spec[1]) if type(spec[1]) is str else None
            if typed is None:
                raise InvalidArgumentError(f"unknown typed column {short(spec[1])}")
            values: list[Any] = self._array(spec[2], typed, n, writable=False).tolist()
            return values
        if tag == "v":
            _expect_len(spec, 3)
            return _values(spec[1], spec[2], n)
        if tag == "o":
            return [self._ragged(spec, n)]
        if tag == "g":
            _expect_len(spec, 4)
            return self._pieces(spec[1], spec[2], spec[3], n)
        raise InvalidArgumentError(f"unknown SPEC tag {tag!r}")

    def _ragged(self, spec: list[Any], n: int) -> np.ndarray[Any, Any]:
        """An ``"o"`` leaf's object array of 1-D arrays (views of one buffer)."""
        _expect_len(spec, 5)
        count = spec[2]
        if n != 1 or type(count) is not int or not 0 < count <= self._objects:
            raise InvalidArgumentError(
                f"bad ragged leaf of {short(count)} arrays in a column of {n}"
            )
        self._objects -= count
        return object_array(self._pieces(spec[1], spec[3], spec[4], count))

    def _pieces(
        self, dtype_text: object, values: object, lengths_ref: object, count: int
    ) -> list[np.ndarray[Any, Any]]:
        """``count`` 1-D arrays: ``values`` cut at ``lengths`` (views of one buffer)."""
        dtype = _dtype(dtype_text, ARRAY_KINDS)
        lengths = self._array(lengths_ref, np.dtype("<i8"), count, writable=False)
        if lengths.min() < 0:
            raise InvalidArgumentError(f"bad ragged lengths {short(lengths.tolist())}")
        ends = list(itertools.accumulate(lengths.tolist()))  # Python ints: no overflow
        flat = self._array(values, dtype, ends[-1], writable=True)
        return [flat[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]

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
            raise InvalidArgumentError(f"bad buffer reference {short(ref)}")
        if len(data) != count * dtype.itemsize:
            raise InvalidArgumentError(
                f"buffer holds {len(data)} bytes but {count} x {dtype.str} need"
                f" {count * dtype.itemsize}"
            )
        return np.frombuffer(data, dtype=dtype)


def _builder(spec: list[Any], children: list[_Builder]) -> _Builder:
    """How to assemble a container SPEC's element from its children's builders."""
    if spec[0] == "T":
        return lambda leaves: tuple([child(leaves) for child in children])
    if spec[0] == "L":
        return lambda leaves: [child(leaves) for child in children]
    keys = _field(spec, 1, list)
    if len(keys) != len(children) or not all(type(k) is str for k in keys):
        raise InvalidArgumentError(f"malformed dict SPEC keys {short(keys)}")
    pairs = list(zip(keys, children, strict=True))
    return lambda leaves: {key: child(leaves) for key, child in pairs}


def object_array(pieces: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """A 1-D object array holding ``pieces`` (numpy would stack equal shapes).

    >>> object_array([np.arange(2), np.arange(2)]).shape
    (2,)
    """
    result = np.empty(len(pieces), dtype=object)
    for index, piece in enumerate(pieces):
        result[index] = piece
    return result


def _table_rows(keys: list[str], columns: list[list[Any]], n: int) -> list[Any]:
    """Dicts of leaves, one per element: filled a column at a time (the fastest way).

    >>> _table_rows(["a", "b"], [[1, 2], ["x", "y"]], 2)
    [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'y'}]
    """
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, column in zip(keys, columns, strict=True):
        for row, value in zip(rows, column, strict=True):
            row[key] = value
    return rows


def _is_leaf(spec: list[Any]) -> bool:
    """Whether a validated SPEC node is a leaf."""
    return spec[0] not in CONTAINERS


def _values(name: object, values: object, n: int) -> list[Any]:
    """The ``n`` values of a ``"v"`` leaf, type-checked."""
    if type(name) is not str or name not in WIRE_VALUES:
        raise InvalidArgumentError(f"unknown value type {short(name)}")
    if type(values) is not list or len(values) != n:
        raise InvalidArgumentError(f"value column of {name} must list {n} values")
    kind, convert = WIRE_VALUES[name]
    if values and set(map(type, values)) != {kind}:  # C loops, not a generator
        raise InvalidArgumentError(f"value column of {name} holds other types")
    return values if convert is None else [convert(value) for value in values]


def _dtype(text: object, kinds: frozenset[str]) -> np.dtype[Any]:
    """The dtype a header names, which must be canonical and of ``kinds``."""
    if type(text) is not str or len(text) > 32:
        raise InvalidArgumentError(f"bad dtype {short(text)}")
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
        or len(value) > MAX_NDIM
        or not all(type(dim) is int and 0 <= dim < 1 << 62 for dim in value)
    ):
        raise InvalidArgumentError(f"bad shape {short(value)}")
    return tuple(value)


def _expect_len(spec: list[Any], length: int) -> None:
    if len(spec) != length:
        raise InvalidArgumentError(
            f"SPEC node {spec[0]!r} needs {length} fields, got {len(spec)}"
        )
