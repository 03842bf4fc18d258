"""``Block``: consecutive elements of one structure, held as columns.

A source that reads in bulk (``range``, ``from_tensor_slices``, Parquet rows)
hands a worker its elements a block at a time (``next_block``): each leaf of
the structure is a column of ``n`` values (an array whose first axis is the
element, or a list of Python values). The worker buffers, sends and
acknowledges a block as one item, encoded once columnar
(``frames.encode_block``); the trainer's decoder cuts the rows. Its
elements are exactly those the source yields one at a time.

>>> import numpy as np
>>> block = Block.of({"x": 0, "s": ""}, [np.arange(4), ["a", "b", "c", "d"]])
>>> block.n, block.rows()[1]
(4, {'x': np.int64(1), 's': 'b'})
>>> head, tail = block.cut(3)
>>> head.n, tail.rows()
(3, [{'x': np.int64(3), 's': 'd'}])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zmqdata._dataset import structure


@dataclass(frozen=True, slots=True)
class Block:
    """``n`` elements shaped as ``first``, leaf ``j`` of element ``i`` at ``columns[j][i]``."""

    first: Any
    """Element 0: the structure every element shares (``structure.flatten`` order)."""
    columns: Sequence[Any]
    n: int

    @classmethod
    def of(cls, template: Any, columns: Sequence[Any]) -> Block:
        """The block of ``columns`` (equal lengths, n > 0), leaves of ``template``'s structure."""
        first = structure.pack_as(template, [column[0] for column in columns])
        return cls(first, columns, len(columns[0]))

    def element(self, index: int) -> Any:
        """Element ``index``."""
        return structure.pack_as(self.first, [column[index] for column in self.columns])

    def rows(self) -> list[Any]:
        """Every element, in order."""
        return [self.element(i) for i in range(self.n)]

    def part(self, lo: int, hi: int) -> Block:
        """Elements ``lo`` to ``hi`` (excluded; ``0 <= lo < hi <= n``)."""
        first = self.first if lo == 0 else self.element(lo)
        return Block(first, [column[lo:hi] for column in self.columns], hi - lo)

    def cut(self, k: int) -> tuple[Block, Block]:
        """The first ``k`` elements and the rest (0 < k < n)."""
        return self.part(0, k), self.part(k, self.n)


END = Block(None, (), 0)
"""No more elements (``next_block``)."""
