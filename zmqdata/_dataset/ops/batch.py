"""``batch`` (leaf-wise ``np.stack``) and ``unbatch``, in blocks where the input gives them.

Over an input that hands out blocks (``next_block``: sources that read in
bulk, ``map(vectorized=True)`` and ``filter`` over them) a batch is cut out of
the blocks' columns (``columns.py``), not stacked row by row, and
``batch``'s own ``next_block`` hands out blocks of batches: each leaf column
shaped ``(k, batch_size, ...)``, a partial last batch in a block of its own.
``unbatch``'s ``next_block`` joins a block of batches into columns of rows.
Either way the elements are those made one at a time.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.block import END, Block
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    UnaryIterator,
)
from zmqdata._dataset.marks import Marks, Parent
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.ops.columns import joined, rows_of, text_widths, with_width
from zmqdata._wire.lineage import EMPTY, Lineage, cut, join, keys_only

BLOCK_BYTES = 4 << 20
"""About the most bytes of rows one block of batches holds (``next_block``)."""


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
    """Batches of ``size`` elements, cut out of the input's blocks where it gives them.

    ``next_block`` reads the rows of up to ``limit`` batches (``BLOCK_BYTES``
    at most). A block holds batches of one dtype per leaf: where a text
    column's width changes from one batch to the next, or a column is not
    one of fixed-width values (its rows are stacked), the rows past the
    block's batches are held for the next (``_held``, saved with the
    position), and blocks hold one batch from then on.
    """

    _tracked = False
    """Whether the batches' lineage is tracked (their blocks' ``widths``)."""

    def __init__(
        self, source: DatasetIterator, size: int, drop_remainder: bool
    ) -> None:
        super().__init__(source)
        self._size, self._drop_remainder = size, drop_remainder
        self._held: deque[Block] = deque()
        """Rows read and not batched yet, in order."""
        self._held_keys: Lineage = EMPTY
        """What the held rows stand for (tracked)."""
        self._single = False
        """Blocks hold one batch (the batches' dtypes changed, or rows are stacked)."""
        self._made = False
        """``next_block`` made a block: it makes them to the end."""

    def __next__(self) -> Any:
        parts = self._read(1)
        if parts is None:  # one at a time
            elements = self._gather()
            if not elements or (self._drop_remainder and len(elements) < self._size):
                raise StopIteration
            return structure.stack(elements)
        n = parts[0].n if len(parts) == 1 else sum(part.n for part in parts)
        if not n or (self._drop_remainder and n < self._size):
            raise StopIteration
        made = _leaves(parts, 1, n)
        if made is None:
            return structure.stack(_first_rows(parts, n))
        first = parts[0].first
        if not structure.is_container(first):
            return made[0][0]
        return structure.pack_as(first, made[0])

    def next_block(self, limit: int) -> Block | None:
        parts = self._read(1 if self._single else limit)
        if parts is None:  # after blocks: a Parquet reader restored at its end
            return END if self._made else None
        self._made = True
        n, size = sum(part.n for part in parts), self._size
        if n < size:  # the end
            if not n or self._drop_remainder:
                return END
            size = n
        block = self._batches(parts, n // size, size)
        used = block.n * size
        if self._tracked:
            widths = np.concatenate([part.own_widths() for part in parts])[:used]
            block = Block(block.first, block.columns, block.n, _sums(widths, size))
        if used < n:
            self._hold(parts, used)
        return block

    def _gather(self) -> list[Any]:
        """Up to ``size`` next elements, one at a time."""
        elements = []
        for element in self._input:
            elements.append(element)
            if len(elements) == self._size:
                break
        return elements

    def _read(self, batches: int) -> list[Block] | None:
        """The rows of up to ``batches`` batches, as blocks (fewer only at the end).

        None: the input gives no blocks. Held rows come first; the first
        read asks for one batch, and tells how many fit in ``BLOCK_BYTES``.
        """
        parts: list[Block] = []
        have, target = 0, self._size
        if self._held:
            if batches > 1:
                target = self._target(self._held[0], batches)
            while self._held and have < target:
                part = self._held.popleft()
                if have + part.n > target:
                    part, rest = part.cut(target - have)
                    self._held.appendleft(rest)
                parts.append(part)
                have += part.n
            keys, self._held_keys = cut(
                self._held_keys, sum(part.keys(part.n) for part in parts)
            )
            self._took(keys)
        while have < target:
            block = self._input.next_block(target - have)
            if block is None:
                # An iterator that made blocks says None only at its end
                # (a Parquet reader restored there).
                return parts or None
            if not block.n:
                break
            self._took(self._input.lineage)
            if not parts and batches > 1:
                target = self._target(block, batches)
            parts.append(block)
            have += block.n
        return parts

    def _target(self, rows: Block, batches: int) -> int:
        """How many rows to read for up to ``batches`` batches, ``BLOCK_BYTES`` at most."""
        row_bytes = sum(
            column.nbytes if isinstance(column, np.ndarray) else 8 * len(column)
            for column in rows.columns
        ) // max(1, rows.n)
        fit = BLOCK_BYTES // max(1, row_bytes * self._size)
        return self._size * max(1, min(batches, fit))

    def _took(self, lineage: Lineage) -> None:
        """Rows standing for ``lineage`` were read (tracked)."""

    def _batches(self, parts: list[Block], count: int, size: int) -> Block:
        """A block of the first of ``count`` batches of ``size`` rows of ``parts``.

        As many as share their leaves' dtypes; one, stacked, where a column
        is not of fixed-width values. Fewer than ``count``: blocks hold one
        batch from then on.
        """
        made = _leaves(parts, count, size)
        if made is None:
            self._single = True
            batch = structure.stack(_first_rows(parts, size))
            leaves = [np.asarray(leaf)[None] for leaf in structure.flatten(batch)]
            return Block(batch, leaves, 1)
        columns, made_count = made
        self._single |= made_count < count
        return Block.of(
            parts[0].first,
            [c.reshape(made_count, size, *c.shape[1:]) for c in columns],
        )

    def _hold(self, parts: list[Block], used: int) -> None:
        """Holds the rows of ``parts`` past the first ``used``, before those held."""
        rest = []
        for part in parts:
            if used >= part.n:
                used -= part.n
                continue
            rest.append(part.part(used, part.n) if used else part)
            used = 0
        self._held.extendleft(reversed(rest))

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self._held:
            state["held"] = [
                {"first": part.first, "columns": list(part.columns)}
                for part in self._held
            ]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._held.clear()
        self._held_keys = EMPTY
        for part in state.get("held", ()):
            n = len(part["columns"][0])
            widths = np.zeros(n, np.int64) if self._tracked else None  # claim nothing
            self._held.append(Block(part["first"], part["columns"], n, widths))


def _leaves(
    parts: list[Block], count: int, size: int
) -> tuple[list[np.ndarray], int] | None:
    """The leaves of the first of ``count`` batches of ``size`` rows of ``parts``.

    Each leaf's batches one after another, as many batches as share their
    dtypes, and how many; None where a column is not of fixed-width values.
    """
    rows = count * size
    leaves, texts = [], []
    for index in range(len(parts[0].columns)):
        column = joined([part.columns[index] for part in parts])
        if column is None:
            return None
        if len(column) > rows:
            column = column[:rows]
        widths = text_widths(column, size)
        if widths is not None:
            texts.append((index, widths))
        leaves.append(column)
    for _, widths in texts:  # as many batches as are as wide as the first
        same = widths == widths[0]
        if not same.all():
            count = min(count, int(np.argmin(same)))
    for index, widths in texts:
        leaves[index] = with_width(leaves[index][: count * size], int(widths[0]))
    if count * size < rows:
        leaves = [leaf[: count * size] for leaf in leaves]
    return leaves, count


def _first_rows(parts: list[Block], size: int) -> list[Any]:
    """The first ``size`` rows of ``parts``."""
    rows: list[Any] = []
    for part in parts:
        rows.extend(part.element(i) for i in range(min(part.n, size - len(rows))))
        if len(rows) == size:
            break
    return rows


def _sums(widths: np.ndarray, size: int) -> np.ndarray:
    """The keys each batch of ``size`` rows stands for, of its rows' ``widths``."""
    sums: np.ndarray = widths.reshape(-1, size).sum(axis=1)
    return sums


class _LineageBatchIterator(_BatchIterator):
    """A batch stands for its elements (a dropped remainder for nothing)."""

    _tracked = True
    _taken: list[int]

    def __next__(self) -> Any:
        self._taken = []
        batch = super().__next__()
        self.lineage = tuple(self._taken)
        return batch

    def next_block(self, limit: int) -> Block | None:
        self._taken = []
        block = super().next_block(limit)
        if block is not None and block.n:
            assert block.widths is not None  # tracked
            batched = int(block.widths.sum())
            self.lineage, rest = cut(tuple(self._taken), batched)
            self._held_keys = join(rest, self._held_keys)
        return block

    def _took(self, lineage: Lineage) -> None:
        _extend(self._taken, lineage)

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
    """The rows of the input's batches; ``next_block`` cuts blocks of them out of a batch.

    A block of batches is loaded as one batch of all their rows where its
    columns join (``columns.rows_of``), else batch by batch: the batches
    read and not loaded yet wait in ``_queue`` (saved with the position).
    An input that gives no blocks is read a batch at a time: blocks come
    either way.
    """

    def __init__(self, source: DatasetIterator) -> None:
        super().__init__(source)
        self._batch: Any = None
        self._size = self._index = 0
        self._queue: deque[Any] = deque()
        self._per = 0
        """Rows per batch in the last block read (0: none read yet)."""

    def __next__(self) -> Any:
        index = self._next_index()  # may load the next batch
        return structure.slice_at(self._batch, index)

    def next_block(self, limit: int) -> Block | None:
        while self._index >= self._size:
            if self._queue:
                self._load(self._queue.popleft())
                continue
            block = self._input.next_block(
                max(1, limit // self._per) if self._per else 1
            )
            if block is None:  # no blocks: the next batch
                try:
                    self._load(next(self._input))
                except StopIteration:
                    return END
                continue
            if not block.n:
                return block
            batches = _batches_of(block)
            if len(batches) == 1:  # joined (or one): a first dimension to go by
                self._per = max(1, structure.first_dim(batches[0]) // block.n)
            self._queue.extend(batches)
        lo = self._index
        self._index = hi = min(self._size, lo + limit)
        leaves = structure.flatten(self._batch)
        return Block.of(self._batch, [np.asarray(leaf)[lo:hi] for leaf in leaves])

    def _next_index(self) -> int:
        """The index in its batch of the next element (loading batches as needed)."""
        while self._index >= self._size:
            self._load(self._queue.popleft() if self._queue else next(self._input))
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
            "queue": list(self._queue),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._batch, self._size, self._index = (
            state["batch"],
            state["size"],
            state["index"],
        )
        self._queue = deque(state.get("queue", ()))


def _batches_of(block: Block) -> list[Any]:
    """A block's batches: one of all their rows where its columns join, else each."""
    joined = [rows_of(column) for column in block.columns]
    if not joined or any(each is None for each in joined):
        return block.rows()
    rows, counts = zip(*joined, strict=True)
    if any(not np.array_equal(each, counts[0]) for each in counts[1:]):
        return block.rows()  # unequal first dimensions: each batch raises
    return [structure.pack_as(block.first, rows)]


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

    def next_block(self, limit: int) -> Block | None:
        """None: one at a time (a batch's rows carry its marks and its lineage)."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._held = EMPTY
        self._parent = self._rows = None
