"""``Block``: consecutive elements of one structure, held as columns.

A source that reads in bulk (``range``, ``from_tensor_slices``, Parquet rows)
hands a worker its elements a block at a time (``next_block``): each leaf of
the structure is a column of ``n`` values (an array whose first axis is the
element, or a list of Python values). ``map(vectorized=True)``, ``filter``,
``batch`` and ``unbatch`` pass blocks on (docs/ops.md, "Blocks"). The worker
buffers, sends and acknowledges a block as one item, encoded once columnar
(``frames.encode_block``); the trainer's decoder cuts the rows. Its elements
are exactly those the pipeline yields one at a time.

With lineage (exactly once), a block stands for the keys its iterator's
``lineage`` says, element by element in their order: ``widths[i]`` of them
for element ``i`` (one each without ``widths``). A batch stands for its rows'
keys, an element a ``filter`` kept also for those it dropped next to it.

>>> import numpy as np
>>> block = Block.of({"x": 0, "s": ""}, [np.arange(4), ["a", "b", "c", "d"]])
>>> block.n, block.rows()[1]
(4, {'x': np.int64(1), 's': 'b'})
>>> head, tail = block.cut(3)
>>> head.n, tail.rows()
(3, [{'x': np.int64(3), 's': 'd'}])
>>> batches = Block.of(0, [np.arange(6).reshape(3, 2)], widths=np.array([2, 2, 1]))
>>> batches.lineages((10, 14, 20, 21)), batches.runs(), batches.keys(2)
([(10, 12), (12, 14), (20, 21)], [2, 2, 1, 1], 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._wire.lineage import EMPTY, Lineage, cut


@dataclass(slots=True, eq=False)
class Block:
    """``n`` elements shaped as ``first``, leaf ``j`` of element ``i`` at ``columns[j][i]``.

    Not changed once made (not frozen: one is made per block on the hot path).
    """

    first: Any
    """Element 0: the structure every element shares (``structure.flatten`` order)."""
    columns: Sequence[Any]
    n: int
    widths: np.ndarray | None = None
    """With lineage: how many of the block's keys each element stands for (None: one)."""

    @classmethod
    def of(
        cls, template: Any, columns: Sequence[Any], widths: np.ndarray | None = None
    ) -> Block:
        """The block of ``columns`` (equal lengths, n > 0), leaves of ``template``'s structure."""
        first = structure.pack_as(template, [column[0] for column in columns])
        return cls(first, columns, len(columns[0]), widths)

    def element(self, index: int) -> Any:
        """Element ``index``."""
        return structure.pack_as(self.first, [column[index] for column in self.columns])

    def rows(self) -> list[Any]:
        """Every element, in order."""
        return [self.element(i) for i in range(self.n)]

    def part(self, lo: int, hi: int) -> Block:
        """Elements ``lo`` to ``hi`` (excluded; ``0 <= lo < hi <= n``)."""
        first = self.first if lo == 0 else self.element(lo)
        widths = None if self.widths is None else self.widths[lo:hi]
        return Block(first, [column[lo:hi] for column in self.columns], hi - lo, widths)

    def cut(self, k: int) -> tuple[Block, Block]:
        """The first ``k`` elements and the rest (0 < k < n)."""
        return self.part(0, k), self.part(k, self.n)

    def select(self, indices: np.ndarray, widths: np.ndarray | None) -> Block:
        """Elements ``indices`` (ascending, one at least), standing for ``widths`` keys each."""
        columns = [
            column[indices]
            if isinstance(column, np.ndarray)
            else [column[i] for i in indices]
            for column in self.columns
        ]
        first = self.first if indices[0] == 0 else self.element(int(indices[0]))
        return Block(first, columns, len(indices), widths)

    def claiming(self, keys: int) -> Block:
        """This block, its first element standing for ``keys`` more keys.

        Those dropped or owed before it: they come first in its lineage.
        """
        if not keys:
            return self
        widths = self.own_widths().copy()
        widths[0] += keys
        return Block(self.first, self.columns, self.n, widths)

    def own_widths(self) -> np.ndarray:
        """How many keys each element stands for, ``widths`` or one each."""
        return np.ones(self.n, np.int64) if self.widths is None else self.widths

    def keys(self, k: int) -> int:
        """How many keys the first ``k`` elements stand for."""
        return k if self.widths is None else int(self.widths[:k].sum())

    def lineages(self, lineage: Lineage) -> list[Lineage]:
        """What each element stands for, of the block's ``lineage`` (EMPTY each without)."""
        if not lineage:
            return [EMPTY] * self.n
        out = []
        for width in self.own_widths().tolist():
            head, lineage = cut(lineage, width)
            out.append(head)
        return out

    def runs(self) -> list[int]:
        """How many keys each element stands for, run-length: ``[count, width, ...]``.

        The form of a reply's ``Coverage.widths``.
        """
        if self.widths is None:
            return [self.n, 1]
        widths = self.widths
        starts = np.flatnonzero(np.diff(widths, prepend=-1))
        counts = np.diff(starts, append=self.n)
        return [
            int(x)
            for pair in zip(counts.tolist(), widths[starts].tolist(), strict=True)
            for x in pair
        ]


END = Block(None, (), 0)
"""No more elements (``next_block``)."""
