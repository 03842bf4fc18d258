"""Elements to a frames header's structure entry and its buffers.

Each element gets a *signature* (its structure, dtypes and shapes) and its
leaves in depth-first order; a batch of equal signatures whose arrays are small
travels columnar (one SPEC), anything else as rows (a SPEC per element). The
layout is described in :mod:`zmqdata._wire.frames`.

>>> encoder = Encoder(level=None)
>>> encoder.structure([1, 2])
{'c': ['v', 'int', [1, 2]]}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np

from zmqdata._wire.codec import byte_view, maybe_compress
from zmqdata._wire.limits import DEFAULT_LIMITS, OBJECTS_FLOOR, OBJECTS_PER_BYTE
from zmqdata._wire.schema import (
    ARRAY_KINDS,
    COLUMN_MAX_NDIM,
    CONTAINERS,
    FIXED_SCALARS,
    INLINE_BUDGET,
    INLINE_MAX,
    MAX_DEPTH,
    MIN_TYPED_COLUMN,
    SCALAR_KINDS,
    TYPED_COLUMNS,
    VALUE_TYPES,
)
from zmqdata.errors import InvalidArgumentError

# A structure signature: ("T"|"L", children), ("D", keys, children),
# ("a", dtype, shape), ("o", dtype, count), ("s", dtype), or a type from VALUE_TYPES.
Sig: TypeAlias = "tuple[Any, ...] | type"
_Signer: TypeAlias = Callable[[Any, list[Any], int], Sig]


class Encoder:
    """Turns element signatures and leaf columns into specs and buffers.

    Attributes:
        table: The buffer table, ``[[codec, nbytes], ...]``.
        frames: The buffers the table lists, in order.
    """

    def __init__(self, level: int | None) -> None:
        self._level = level
        self._inline = 0
        self._bytes = 0
        self.table: list[list[Any]] = []
        self.frames: list[bytes | memoryview] = []

    def structure(self, items: list[Any]) -> dict[str, Any]:
        """The header's ``"c"`` or ``"r"`` entry for ``items``.

        Raises:
            InvalidArgumentError: An element holds an unsupported type or
                dtype (the message names the element and the path in it).
        """
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

    def block(
        self, first: Any, columns: Sequence[Sequence[Any]], n: int
    ) -> dict[str, Any] | None:
        """The ``"c"`` entry of ``n`` elements shaped as ``first``, from their leaf ``columns``.

        No signature per element. None where ``structure`` would send such
        elements as rows (large arrays): then send the rows.

        >>> import numpy as np
        >>> Encoder(level=None).block(np.int64(0), [np.arange(3)], 3)["c"][:2]
        ['s', '<i8']
        """
        sig = _signatures([first])[0][0]
        if not _columnar(sig, n):
            return None
        ragged = (_is_ragged(column) for column in columns)
        return {"c": self._columns(_with_ragged(sig, ragged), iter(columns), n)}

    def _columns(self, sig: Sig, columns: Iterator[Sequence[Any]], n: int) -> Any:
        """The columnar SPEC of ``n`` elements of ``sig``.

        Its buffers stay uncompressed when the batch decodes to more objects
        than ``OBJECTS_FLOOR``: a receiver refuses more objects per byte
        received than ``OBJECTS_PER_BYTE``, as it cannot tell such a message
        from a forged element count.
        """
        if n > 1 and n * _node_count(sig) > OBJECTS_FLOOR:
            self._level = None
        return self._spec(sig, columns, n)

    def _spec(self, sig: Sig, columns: Iterator[Sequence[Any]], n: int) -> Any:
        """The SPEC for ``sig``, taking leaf columns (of ``n`` values) in order."""
        if isinstance(sig, tuple):
            tag = sig[0]
            if tag in ("T", "L"):
                return [tag, [self._spec(child, columns, n) for child in sig[1]]]
            if tag == "D":
                return [tag, list(sig[1]), [self._spec(c, columns, n) for c in sig[2]]]
        return self._leaf(sig, next(columns), n)

    def _leaf(self, sig: Sig, values: Sequence[Any], n: int) -> list[Any]:
        """The SPEC leaf holding ``values``."""
        if not isinstance(sig, tuple):
            return self._values(sig, values, n)
        dtype: np.dtype[Any] = sig[1]
        if sig[0] == "s":
            return ["s", dtype.str, self._place(np.array(values, dtype=dtype))]
        if sig[0] == "o":  # rows only: n == 1
            items = values[0]
            return ["o", dtype.str, len(items), *self._pieces(items, dtype)]
        if sig[0] == "g":  # a block's column of 1-D arrays of any lengths
            return ["g", dtype.str, *self._pieces(values, dtype)]
        self._claim(n * math.prod(sig[2]) * dtype.itemsize)
        column = values[0] if n == 1 else np.array(values, dtype=dtype)
        return ["a", dtype.str, list(sig[2]), self._place(column)]

    def _pieces(self, items: Sequence[Any], dtype: np.dtype[Any]) -> list[bytes | int]:
        """1-D arrays as two REFs: their values end to end, and their lengths."""
        lengths = np.fromiter(map(len, items), dtype="<i8", count=len(items))
        flat = np.concatenate(items, dtype=dtype)  # keeps the byte order
        self._claim(flat.nbytes + lengths.nbytes)
        return [self._place(flat), self._place(lengths)]

    def _values(self, kind: type, values: Sequence[Any], n: int) -> list[Any]:
        """A ``"p"`` leaf (a typed array) if worth it, else a ``"v"`` one."""
        name = VALUE_TYPES[kind]
        if kind is bytes or kind is str:
            self._claim(sum(map(len, values)))
        dtype = TYPED_COLUMNS.get(name)
        if dtype is not None and n >= MIN_TYPED_COLUMN:
            try:
                column = np.array(values, dtype=dtype)
            except OverflowError:  # an int outside int64: msgpack carries it
                pass
            else:
                return ["p", name, self._place(column)]
        return ["v", name, list(values)]

    def _claim(self, nbytes: int) -> None:
        """Counts ``nbytes`` more, refused over what a receiver accepts, unserialized."""
        self._bytes += nbytes
        limit = DEFAULT_LIMITS.max_bytes
        if self._bytes > limit:
            raise InvalidArgumentError(
                f"the elements hold {self._bytes} bytes or more of arrays, bytes and "
                f"str, over the {limit} bytes one message may carry (what every "
                "receiver accepts): send smaller elements (e.g. smaller batches)"
            )

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


class _Unsupported(Exception):
    """An element part that cannot be encoded, and where it sits."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[object] = []


def signature(element: Any) -> tuple[Sig, list[Any]]:
    """``element``'s signature and its leaves, depth first.

    Raises ``InvalidArgumentError`` where the element cannot be encoded.

    >>> signature({"a": np.int64(1)})
    (('D', ('a',), (('s', dtype('int64')),)), [np.int64(1)])
    """
    sigs, rows = _signatures([element])
    return sigs[0], rows[0]


def without_lengths(sig: Sig) -> Sig:
    """``sig`` with the lengths of its 1-D array leaves erased (a block's ragged columns).

    >>> without_lengths(("T", (("a", np.dtype("int32"), (5,)), int)))
    ('T', (('a', dtype('int32'), None), <class 'int'>))
    """
    if isinstance(sig, tuple):
        if sig[0] in CONTAINERS:
            return (*sig[:-1], tuple(without_lengths(child) for child in sig[-1]))
        if sig[0] == "a" and len(sig[2]) == 1:
            return ("a", sig[1], None)
    return sig


def _fast_signature(items: list[Any]) -> Sig | None:
    """The shared signature of a batch of same-typed scalars, else ``None``."""
    if not items:
        return None
    kind = type(items[0])
    if kind not in VALUE_TYPES and kind not in FIXED_SCALARS:
        return None
    if not all(type(item) is kind for item in items):
        return None
    return kind if kind in VALUE_TYPES else ("s", items[0].dtype)


def _signatures(items: list[Any]) -> tuple[list[Sig], list[list[Any]]]:
    """Each element's signature, and its leaves in depth-first order."""
    sigs: list[Sig] = []
    rows: list[list[Any]] = []
    try:
        for item in items:
            leaves: list[Any] = []
            sign: _Signer = _SIGNATURES.get(type(item), _rare)
            sigs.append(sign(item, leaves, 0))
            rows.append(leaves)
    except _Unsupported as error:
        path = "".join(f"[{key!r}]" for key in error.path)
        raise InvalidArgumentError(
            f"cannot encode element {len(sigs)}{path}: {error.reason}"
        ) from None
    return sigs, rows


def _value(value: object, leaves: list[Any], depth: int) -> Sig:
    """A Python-level leaf (of ``VALUE_TYPES``): its type."""
    leaves.append(value)
    return type(value)


def _array(value: np.ndarray[Any, Any], leaves: list[Any], depth: int) -> Sig:
    if value.dtype.kind == "O":
        return _ragged(value, leaves)
    if value.dtype.kind not in ARRAY_KINDS:
        raise _Unsupported(_bad_dtype(value.dtype, "array"))
    leaves.append(value)
    return ("a", value.dtype, value.shape)


def _ragged(value: np.ndarray[Any, Any], leaves: list[Any]) -> Sig:
    """An object array of 1-D arrays of one dtype: ``("o", dtype, count)``."""
    items = list(value) if value.ndim == 1 else []
    dtype = items[0].dtype if items and type(items[0]) is np.ndarray else None
    if (
        dtype is None
        or dtype.kind not in ARRAY_KINDS
        or not all(
            type(item) is np.ndarray and item.ndim == 1 and item.dtype == dtype
            for item in items
        )
    ):
        raise _Unsupported(
            f"array dtype object of shape {value.shape} is supported only as a"
            " non-empty 1-D array of 1-D numpy arrays of one dtype, not object"
            " (nothing is pickled)"
        )
    leaves.append(items)
    return ("o", dtype, len(items))


def _scalar(value: np.generic, leaves: list[Any], depth: int) -> Sig:
    leaves.append(value)
    return ("s", value.dtype)


def _sequence(value: tuple[Any, ...] | list[Any], leaves: list[Any], depth: int) -> Sig:
    return ("T" if type(value) is tuple else "L", _children(value, leaves, depth))


def _dict(value: dict[Any, Any], leaves: list[Any], depth: int) -> Sig:
    bad = next((key for key in value if type(key) is not str), None)
    if bad is not None:
        raise _Unsupported(f"dict key {bad!r} is not a str")
    return ("D", tuple(value), _children(value, leaves, depth))


def _rare(value: object, leaves: list[Any], depth: int) -> Sig:
    """The signature of datetime scalars; rejects every other type."""
    if isinstance(value, np.generic):
        if value.dtype.kind not in SCALAR_KINDS:
            raise _Unsupported(_bad_dtype(value.dtype, "numpy scalar"))
        return _scalar(value, leaves, depth)
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


# The signature of a value by its exact type (subclasses go to _rare); each
# appends the value's leaves to ``leaves``.
_SIGNATURES: dict[type, _Signer] = {
    **{kind: _scalar for kind in FIXED_SCALARS},
    **{kind: _value for kind in VALUE_TYPES},
    np.ndarray: _array,
    tuple: _sequence,
    list: _sequence,
    dict: _dict,
}


def _children(
    container: tuple[Any, ...] | list[Any] | dict[str, Any],
    leaves: list[Any],
    depth: int,
) -> tuple[Sig, ...]:
    """The signatures of a container's children."""
    if depth >= MAX_DEPTH:
        raise _Unsupported(f"structure nested deeper than {MAX_DEPTH} levels")
    values = container.values() if isinstance(container, dict) else container
    sigs: list[Sig] = []
    try:
        for child in values:
            sign: _Signer = _SIGNATURES.get(type(child), _rare)
            sigs.append(sign(child, leaves, depth + 1))
    except _Unsupported as error:
        keys = list(container) if isinstance(container, dict) else None
        error.path.insert(0, len(sigs) if keys is None else keys[len(sigs)])
        raise
    return tuple(sigs)


def _bad_dtype(dtype: np.dtype[Any], what: str) -> str:
    return (
        f"{what} dtype {dtype} ({dtype.str!r}) is not supported (no object or"
        " structured dtypes on the wire: nothing is pickled)"
    )


def _columnar(sig: Sig, n: int) -> bool:
    """Whether a batch of ``n`` elements of ``sig`` should travel columnar.

    Not when an array leaf is big (stacking would copy it; rows send it
    zero-copy), nor when elements carry no bytes at all (then ``n`` would not be
    bounded by the message size), nor when they carry too few bytes for their
    objects (a receiver would refuse the batch; rows list every object).
    """
    min_bytes = 0
    for leaf in _leaf_signatures(sig):
        if isinstance(leaf, tuple) and leaf[0] == "o":
            return False
        if isinstance(leaf, tuple) and leaf[0] == "a":
            shape: tuple[int, ...] = leaf[2]
            nbytes = math.prod(shape) * leaf[1].itemsize
            if nbytes >= INLINE_MAX or len(shape) >= COLUMN_MAX_NDIM:
                return False
            min_bytes += nbytes
        else:
            min_bytes += 1
    if min_bytes == 0:
        return False
    return n <= 1 or n * _node_count(sig) <= (
        OBJECTS_PER_BYTE * n * min_bytes + OBJECTS_FLOOR
    )


def _node_count(sig: Sig) -> int:
    """The objects one element of ``sig`` decodes to (as ``limits.count_nodes``)."""
    if isinstance(sig, tuple) and sig[0] in CONTAINERS:
        return 1 + sum(_node_count(child) for child in sig[-1])
    return 1


def _leaf_signatures(sig: Sig) -> Iterator[Sig]:
    if isinstance(sig, tuple) and sig[0] in CONTAINERS:
        for child in sig[-1]:
            yield from _leaf_signatures(child)
    else:
        yield sig


def _is_ragged(column: Any) -> bool:
    """Whether a block's column holds 1-D arrays as an object array (lengths vary)."""
    return isinstance(column, np.ndarray) and column.dtype.kind == "O"


def _with_ragged(sig: Sig, ragged: Iterator[bool]) -> Sig:
    """``sig`` with its array leaves whose column is ragged as ``("g", dtype)``."""
    if isinstance(sig, tuple) and sig[0] in CONTAINERS:
        children = tuple(_with_ragged(child, ragged) for child in sig[-1])
        return (*sig[:-1], children)
    if next(ragged) and isinstance(sig, tuple) and sig[0] == "a" and len(sig[2]) == 1:
        return ("g", sig[1])
    return sig
