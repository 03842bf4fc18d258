"""Leaf columns batched and unbatched as stacking and slicing their rows would.

``batch`` over blocks (``_dataset/block.py``) cuts its batches out of the
blocks' columns, one copy per leaf, instead of stacking rows
(``structure.stack``); ``unbatch`` joins its batches' columns into columns of
rows. The results are exactly those of the rows: a batch's numbers come in
native byte order, and a column of text scalars is as wide as the longest
text of each batch. Columns of other values (objects, lists, records) give
None: their rows are stacked.

>>> import numpy as np
>>> column = joined([np.array([1, 2], ">i2"), np.array([3], ">i2")])
>>> column, column.dtype.isnative
(array([1, 2, 3], dtype=int16), True)
>>> text = np.array(["a", "bbb", "cc", ""])
>>> text_widths(text, 2).tolist(), with_width(text[2:], 2)
([3, 2], array(['cc', ''], dtype='<U2'))
>>> ragged = np.empty(2, object); ragged[:] = [np.arange(2), np.arange(3)]
>>> rows_of(ragged)
(array([0, 1, 0, 1, 2]), array([2, 3]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

FIXED_KINDS = frozenset("biufcmM")
"""Kinds whose batch keeps the column's dtype (numbers, booleans, times)."""
TEXT_KINDS = frozenset("US")
"""Kinds whose scalars batch as wide as their longest (``str``, ``bytes``)."""
JOINABLE = FIXED_KINDS | TEXT_KINDS


def joined(pieces: Sequence[Any]) -> np.ndarray | None:
    """``pieces`` of one leaf column, in order, as one new C-ordered array.

    The dtype a stack of their rows has (native byte order); None where the
    pieces are not arrays of fixed-width values of one dtype and row shape
    (or lists of text).
    """
    if type(pieces[0]) is list:  # Python values: text (Parquet rows) joins
        pieces = [text_array(piece) for piece in pieces]
    first = pieces[0]
    if type(first) is not np.ndarray or first.dtype.kind not in JOINABLE:
        return None
    if len(pieces) == 1:
        out = np.array(first, order="C")
    else:
        kind, shape = first.dtype.kind, first.shape[1:]
        for piece in pieces[1:]:
            if type(piece) is not np.ndarray or piece.shape[1:] != shape:
                return None
            if piece.dtype != first.dtype and not (
                kind in TEXT_KINDS and piece.dtype.kind == kind and not shape
            ):  # text scalars take their batch's width (``text_widths``) anyway
                return None
        out = np.concatenate(pieces)
    return out if out.dtype.isnative else out.astype(out.dtype.newbyteorder("="))


def text_array(values: Any) -> Any:
    """A list of ``str`` (or of ``bytes``) as an array of them; anything else as it is."""
    if type(values) is list and values:
        kind = type(values[0])
        if (kind is str or kind is bytes) and all(type(v) is kind for v in values):
            return np.array(values)
    return values


def text_widths(column: np.ndarray, size: int) -> np.ndarray | None:
    """Each batch of ``size`` rows of a column of text scalars: the width its stack has.

    Its longest text, 1 at least. None for other columns (their batches keep
    the column's dtype).
    """
    if column.ndim != 1 or column.dtype.kind not in TEXT_KINDS:
        return None
    lengths = np.char.str_len(column)
    longest = np.maximum.reduceat(lengths, np.arange(0, len(column), size))
    widths: np.ndarray = np.maximum(longest, 1)
    return widths


def with_width(column: np.ndarray, width: int) -> np.ndarray:
    """A text column as ``width`` characters (or bytes) wide."""
    return column.astype(np.dtype((column.dtype.type, width)))


def rows_of(column: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """A column of batches as one column of their rows, and each batch's row count.

    An array of batches (2-D or more) is reshaped; an object array of arrays
    of one dtype and row shape (a ragged column) joined. None for other
    columns (their batches are sliced one by one).
    """
    if not isinstance(column, np.ndarray) or column.ndim == 0:
        return None
    if column.dtype.kind != "O":
        if column.ndim < 2:
            return None
        counts = np.full(len(column), column.shape[1], np.int64)
        return column.reshape(-1, *column.shape[2:]), counts
    items = list(column)
    first = items[0]
    if column.ndim != 1 or not all(
        isinstance(item, np.ndarray)
        and item.ndim
        and item.dtype == first.dtype
        and item.dtype.kind != "O"
        and item.shape[1:] == first.shape[1:]
        for item in items
    ):
        return None
    counts = np.fromiter(map(len, items), np.int64, len(items))
    return np.concatenate(items), counts
