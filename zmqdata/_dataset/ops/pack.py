"""``pack``: variable-length sequences packed first-fit into rows of ``length`` slots.

An element is a 1-D array (its tokens) or a dict of equal-length 1-D arrays
(tokens, a loss mask, ...). It goes into the first open row with room for it;
with no such row, a new row opens, and when ``num_open_rows`` are open already
the fullest one goes out to make room. A row that fills up goes out at once,
and at the end of the input the open rows go out in the order they opened.

A row is a dict: the element's arrays (``"tokens"`` for a plain array), each
``[length]`` and padded, plus ``"segment_ids"`` (``int32``, 1, 2, ... per
sequence in the row, 0 for padding) and ``"positions"`` (``int32``, 0-based
within each sequence, 0 for padding). Empty sequences make no segment.

>>> import numpy as np
>>> row = build_row([np.array([7, 8]), np.array([9])], 4, None)
>>> {key: value.tolist() for key, value in row.items()}
{'tokens': [7, 8, 9, 0], 'segment_ids': [1, 1, 2, 0], 'positions': [0, 1, 0, 0]}
>>> packing_efficiency(row)
0.75
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    GroupingIterator,
    IterContext,
    expands_below,
)
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.ops.batch import _array_dtype
from zmqdata._dataset.ops.padding import (
    constant,
    leaf_values,
    padding_for,
    values_arg,
)
from zmqdata._dataset.structure import TensorSpec
from zmqdata._dataset.validate import check_int
from zmqdata.errors import InvalidArgumentError

TOKENS = "tokens"
"""The key of a plain array element's tokens in its row."""
RESERVED = ("segment_ids", "positions")
"""The keys ``pack`` adds to every row."""


def build(
    parent: Node, spec: Any, length: Any, num_open_rows: Any, padding_values: Any
) -> Node:
    """A ``pack`` node, its arguments checked (against ``spec`` if known)."""
    length = check_int("pack length", length, minimum=1)
    open_rows = check_int("pack num_open_rows", num_open_rows, minimum=1)
    values = values_arg(padding_values)
    try:
        row_spec(spec, length, constant(values))
    except InvalidArgumentError as error:
        raise ValueError(str(error)) from None
    args = {"length": length, "num_open_rows": open_rows, "padding_values": values}
    return Node("pack", args, (parent,))


def row_spec(spec: Any, length: int, values: Any) -> Any:
    """The spec of the rows of elements of ``spec`` (None if unknown)."""
    if spec is None:
        return None
    columns = spec if isinstance(spec, dict) else {TOKENS: spec}
    if not all(isinstance(leaf, TensorSpec) for leaf in columns.values()):
        raise InvalidArgumentError(
            f"pack takes 1-D arrays or dicts of 1-D arrays, got elements of spec {spec}"
        )
    row = {}
    for (key, leaf), value in zip(
        columns.items(), leaf_values(values, spec), strict=True
    ):
        if len(leaf.shape) != 1:
            raise InvalidArgumentError(
                "pack takes 1-D arrays or dicts of 1-D arrays, got elements of "
                f"spec {spec}"
            )
        _check_key(key)
        _, dtype = padding_for(value, _array_dtype(leaf.dtype), repr(key))
        row[key] = TensorSpec((length,), dtype)
    for key in RESERVED:
        row[key] = TensorSpec((length,), np.dtype(np.int32))
    return row


class Pack(Op):
    name = "pack"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if inputs[0] in (0, INFINITE_CARDINALITY):
            return inputs[0]
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return row_spec(
            inputs[0], node.args["length"], constant(node.args["padding_values"])
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        in_read_order = expands_below(node.inputs[0]) if ctx.lineage else None
        return _PackIterator(
            make_iterator(node.inputs[0], ctx),
            node.args["length"],
            node.args["num_open_rows"],
            constant(node.args["padding_values"]),
            in_read_order,
        )


class _Row:
    """An open row: its sequences, the slots they fill, their lineage numbers."""

    __slots__ = ("numbers", "pieces", "used")

    def __init__(self, numbers: list[int]) -> None:
        self.pieces: list[Any] = []
        self.used = 0
        self.numbers = numbers

    def add(self, element: Any, size: int, number: int | None) -> None:
        self.pieces.append(element)
        self.used += size
        if number is not None:
            self.numbers.append(number)


class _PackIterator(GroupingIterator):
    """First-fit over at most ``num_open_rows`` rows.

    With ``in_read_order`` (not None) it tracks lineage: a row claims its
    sequences' keys (``Reorder``).
    """

    def __init__(
        self,
        source: DatasetIterator,
        length: int,
        num_open_rows: int,
        values: Any,
        in_read_order: bool | None,
    ) -> None:
        super().__init__(source, in_read_order)
        self._length, self._num_open_rows, self._values = length, num_open_rows, values
        self._rows: list[_Row] = []
        self._loose: list[int] = []  # numbers of empty sequences no row holds yet

    def __next__(self) -> Any:
        while not self._input_done:
            read = self._read(lambda element: sequence_length(element, self._length))
            if read is None:
                break
            element, size, number = read
            row = self._place(element, size, number)
            if row is not None:
                return self._finish(row)
        if self._rows:
            return self._finish(self._rows.pop(0))
        raise StopIteration

    def _place(self, element: Any, size: int, number: int | None) -> _Row | None:
        """Puts ``element`` in a row; returns the row that goes out, if one does."""
        if size == 0:
            if number is not None:
                (self._rows[0].numbers if self._rows else self._loose).append(number)
            return None
        for row in self._rows:
            if row.used + size <= self._length:
                row.add(element, size, number)
                if row.used < self._length:
                    return None
                self._rows.remove(row)
                return row
        new = _Row(self._loose)
        self._loose = []
        new.add(element, size, number)
        if size == self._length:
            return new
        self._rows.append(new)
        if len(self._rows) <= self._num_open_rows:
            return None
        fullest = max(self._rows[:-1], key=lambda row: row.used)
        self._rows.remove(fullest)
        return fullest

    def _finish(self, row: _Row) -> dict[str, np.ndarray]:
        self._claim(row.numbers)
        return build_row(row.pieces, self._length, self._values)

    def get_state(self) -> dict[str, Any]:
        return {
            "input": self._input.get_state(),
            "rows": [list(row.pieces) for row in self._rows],
            "input_done": self._input_done,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._input_done = state["input_done"]
        self._restart_order()
        self._rows, self._loose = [], []
        for pieces in state["rows"]:
            row = _Row([])
            for element in pieces:
                size = sequence_length(element, self._length)
                row.add(element, size, self._restored_number())
            self._rows.append(row)


def sequence_length(element: Any, length: int) -> int:
    """The length of a sequence to pack (a 1-D array, or a dict of them).

    Raises ``InvalidArgumentError`` naming what is wrong: not 1-D arrays,
    arrays of different lengths, longer than the rows, a reserved key.
    """
    if isinstance(element, dict):
        if not element:
            raise InvalidArgumentError("pack takes dicts of 1-D arrays, got {}")
        for key in element:
            _check_key(key)
        sizes = {key: _size(value) for key, value in element.items()}
        if len(set(sizes.values())) > 1:
            raise InvalidArgumentError(
                f"pack: the arrays of an element have different lengths {sizes}"
            )
        size = next(iter(sizes.values()))
    else:
        size = _size(element)
    if size > length:
        raise InvalidArgumentError(
            f"pack: an element of length {size} is longer than the rows "
            f"(length={length})"
        )
    return size


def _check_key(key: str) -> None:
    if key in RESERVED:
        raise InvalidArgumentError(
            f"pack adds {key!r} to its rows: the elements must not have it"
        )


def _size(value: Any) -> int:
    if not isinstance(value, np.ndarray) or value.ndim != 1:
        shape = getattr(value, "shape", None)
        raise InvalidArgumentError(
            "pack takes 1-D arrays or dicts of 1-D arrays, got "
            f"{type(value).__name__}{'' if shape is None else f' of shape {shape}'}"
        )
    return len(value)


def build_row(pieces: list[Any], length: int, values: Any) -> dict[str, np.ndarray]:
    """The row of ``pieces`` (sequences, in order), padded to ``length``."""
    template = pieces[0]
    columns = _columns(pieces)
    sizes = [len(array) for array in next(iter(columns.values()))]
    used = sum(sizes)
    row: dict[str, np.ndarray] = {}
    for (key, arrays), value in zip(
        columns.items(), leaf_values(values, template), strict=True
    ):
        fill, dtype = padding_for(
            value, np.result_type(*{a.dtype for a in arrays}), repr(key)
        )
        row[key] = np.full(length, fill, dtype)
        row[key][:used] = np.concatenate(arrays)
    row["segment_ids"], row["positions"] = _segments(sizes, length)
    return row


def _columns(pieces: list[Any]) -> dict[str, list[np.ndarray]]:
    """Each key's arrays across ``pieces``; raises if their keys differ."""
    template = pieces[0]
    keys = list(template) if isinstance(template, dict) else [TOKENS]
    columns: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    for piece in pieces:
        if isinstance(piece, dict) != isinstance(template, dict) or (
            isinstance(piece, dict) and set(piece) != set(keys)
        ):
            raise InvalidArgumentError(
                f"pack: elements of one row have different keys: {keys} and "
                f"{list(piece) if isinstance(piece, dict) else 'an array'}"
            )
        for key in keys:
            columns[key].append(piece[key] if isinstance(piece, dict) else piece)
    return columns


def _segments(sizes: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``segment_ids`` and ``positions`` of a row of sequences of ``sizes``."""
    used = sum(sizes)
    starts = np.cumsum([0, *sizes[:-1]])
    segment_ids = np.zeros(length, np.int32)
    segment_ids[:used] = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int32), sizes)
    positions = np.zeros(length, np.int32)
    positions[:used] = np.arange(used) - np.repeat(starts, sizes)
    return segment_ids, positions


def packing_efficiency(packed: Any) -> float:
    """The share of slots that hold tokens (not padding) in rows ``Dataset.pack`` made.

    ``packed`` is a row, a batch of rows (the dict ``pack`` yields, or
    ``batch`` of it) or their ``segment_ids``.

    >>> import zmqdata as zd
    >>> ds = zd.Dataset.from_generator(lambda: (np.ones(n) for n in [3, 2, 4]))
    >>> zd.packing_efficiency(next(iter(ds.pack(5).batch(2))))
    0.9
    """
    ids = packed["segment_ids"] if isinstance(packed, Mapping) else packed
    ids = np.asarray(ids)
    if ids.size == 0 or ids.dtype.kind not in "iu":
        raise ValueError(
            "packing_efficiency takes packed rows or their segment_ids (integers), "
            f"got {structure.spec_of(ids)}"
        )
    return float(np.count_nonzero(ids)) / ids.size
