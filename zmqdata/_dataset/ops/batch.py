"""``batch`` (leaf-wise ``np.stack``) and ``unbatch``."""

from __future__ import annotations

from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    UnaryIterator,
)
from zmqdata._dataset.marks import Marks, Parent
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._wire.lineage import EMPTY, Lineage, join, keys_only


class Batch(Op):
    name = "batch"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        n, size = inputs[0], node.args["batch_size"]
        if n < 0:
            return n
        return int(n // size if node.args["drop_remainder"] else -(-n // size))

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        if inputs[0] is None:
            return None
        outer = node.args["batch_size"] if node.args["drop_remainder"] else None
        return structure.map_leaves(
            lambda s: structure.TensorSpec((outer, *s.shape), _array_dtype(s.dtype)),
            inputs[0],
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        kind = _LineageBatchIterator if ctx.lineage else _BatchIterator
        return kind(
            make_iterator(node.inputs[0], ctx),
            node.args["batch_size"],
            node.args["drop_remainder"],
        )


def _array_dtype(dtype: Any) -> Any:
    """The dtype numpy gives an array of leaves of ``dtype`` (str has no fixed width)."""
    if dtype is str:
        return np.dtype(np.str_)
    if dtype is bytes:
        return np.dtype(np.bytes_)
    return np.dtype(dtype)


class _BatchIterator(UnaryIterator):
    def __init__(
        self, source: DatasetIterator, size: int, drop_remainder: bool
    ) -> None:
        super().__init__(source)
        self._size, self._drop_remainder = size, drop_remainder

    def __next__(self) -> Any:
        column = self._input.next_column(self._size)
        if column is not None:
            return self._from_columns(column)
        elements = self._gather()
        if not elements or (self._drop_remainder and len(elements) < self._size):
            raise StopIteration
        return structure.stack(elements)

    def _gather(self) -> list[Any]:
        """Up to ``size`` next elements."""
        elements = []
        for element in self._input:
            elements.append(element)
            if len(elements) == self._size:
                break
        return elements

    def _from_columns(self, column: np.ndarray) -> np.ndarray:
        """A batch read in bulk (``range``), across split boundaries."""
        columns, count = [column], len(column)
        while count < self._size and len(columns[-1]):
            more = self._more(self._size - count)
            columns.append(more)
            count += len(more)
        if not count or (self._drop_remainder and count < self._size):
            raise StopIteration
        return columns[0] if len(columns) == 1 else np.concatenate(columns)

    def _more(self, limit: int) -> np.ndarray:
        """The next column, after a first one (at a split boundary)."""
        more = self._input.next_column(limit)
        assert more is not None  # a source reads in bulk or never
        return more


class _LineageBatchIterator(_BatchIterator):
    """A batch stands for its elements (a dropped remainder for nothing)."""

    _taken: list[int]

    def __next__(self) -> Any:
        self._taken = []
        batch = super().__next__()
        self.lineage = tuple(self._taken)
        return batch

    def _gather(self) -> list[Any]:
        elements: list[Any] = []
        taken, source, size = self._taken, self._input, self._size
        while len(elements) < size:
            more = source.next_many(size - len(elements))
            if more is None:  # one at a time
                for element in source:
                    elements.append(element)
                    _extend(taken, source.lineage)
                    if len(elements) == size:
                        break
                break
            if not more:
                break
            elements += more
            _extend(taken, source.lineage)
        return elements

    def _from_columns(self, column: np.ndarray) -> np.ndarray:
        _extend(self._taken, self._input.lineage)  # of ``column``, just read
        return super()._from_columns(column)

    def _more(self, limit: int) -> np.ndarray:
        more = super()._more(limit)
        _extend(self._taken, self._input.lineage)
        return more


def _extend(keys: list[int], lineage: Lineage) -> None:
    """Appends ``lineage`` to the flat ranges ``keys``, merging ranges that touch."""
    if not lineage:
        return
    if keys and keys[-1] == lineage[0]:
        keys[-1] = lineage[1]
        if len(lineage) > 2:
            keys.extend(lineage[2:])
    else:
        keys.extend(lineage)


class Unbatch(Op):
    name = "unbatch"
    expands = True

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if inputs[0] in (0, INFINITE_CARDINALITY):
            return inputs[0]
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        if inputs[0] is None:
            return None
        return structure.map_leaves(
            lambda s: structure.TensorSpec(s.shape[1:], s.dtype), inputs[0]
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        source = make_iterator(node.inputs[0], ctx)
        if ctx.lineage:
            return _LineageUnbatchIterator(source, ctx.marks)
        return _UnbatchIterator(source)


class _UnbatchIterator(UnaryIterator):
    def __init__(self, source: DatasetIterator) -> None:
        super().__init__(source)
        self._batch: Any = None
        self._size = self._index = 0

    def __next__(self) -> Any:
        index = self._next_index()  # may load the next batch
        return structure.slice_at(self._batch, index)

    def _next_index(self) -> int:
        """The index in its batch of the next element (loading batches as needed)."""
        while self._index >= self._size:
            self._load(next(self._input))
        self._index += 1
        return self._index - 1

    def _load(self, batch: Any) -> None:
        self._batch = batch
        self._size, self._index = structure.first_dim(batch), 0

    def get_state(self) -> dict[str, Any]:
        return {
            "input": self._input.get_state(),
            "batch": self._batch,
            "size": self._size,
            "index": self._index,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._batch, self._size, self._index = (
            state["batch"],
            state["size"],
            state["index"],
        )


class _LineageUnbatchIterator(_UnbatchIterator):
    """The last element of a batch stands for the batch (and empty ones before it).

    With ``marks``, each element also carries its mark (``_dataset/marks.py``),
    and the elements of a batch a consumer acknowledged before are skipped.
    """

    def __init__(self, source: DatasetIterator, marks: Marks | None) -> None:
        super().__init__(source)
        self._held: Lineage = EMPTY
        self._marks = marks
        self._parent: Parent | None = None
        self._rows: list[Lineage] | None = None
        """The batch's rows' own marks (``Marks.rows``), given back one each."""

    def _load(self, batch: Any) -> None:
        super()._load(batch)
        lineage = self._input.lineage
        self._parent = self._rows = None
        if self._marks is not None:
            self._parent = parent = self._marks.parent(lineage)
            if parent is None:
                self._rows = self._marks.rows(lineage, self._size)
            if self._rows is not None:
                lineage = keys_only(lineage)
            while (
                parent is not None
                and self._index < self._size
                and self._marks.delivered(parent, self._index)
            ):
                self._index += 1
        self._held = join(self._held, lineage)

    def __next__(self) -> Any:
        index = self._next_index()
        mark = EMPTY
        if self._rows is not None:
            mark = self._rows[index]
        elif self._parent is not None:
            assert self._marks is not None
            mark = self._marks.output(self._parent, index)
        if self._index == self._size:
            self.lineage, self._held = join(self._held, mark), EMPTY
        else:
            self.lineage = mark
        return structure.slice_at(self._batch, index)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._held = EMPTY
        self._parent = self._rows = None
