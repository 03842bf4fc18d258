"""``take``, ``skip`` and ``shard``: elements chosen by position."""

from __future__ import annotations

import sys
from typing import Any

from zmqdata._dataset.block import END, Block
from zmqdata._dataset.constants import (
    INFINITE_CARDINALITY,
    SHARD_HINT,
    UNKNOWN_CARDINALITY,
)
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    UnaryIterator,
    consuming,
)
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata.errors import FailedPreconditionError


class _PositionIterator(UnaryIterator):
    """Yields input elements whose 0-based position ``keep(position)`` accepts."""

    def __init__(self, source: DatasetIterator, stop: int | None) -> None:
        super().__init__(source)
        self._position = 0
        self._stop = stop

    def keep(self, position: int) -> bool:
        return True

    def __next__(self) -> Any:
        while self._stop is None or self._position < self._stop:
            element = next(self._input)
            self._position += 1
            if self.keep(self._position - 1):
                return element
        raise StopIteration

    def next_block(self, limit: int) -> Block | None:
        """The input's blocks cut to what ``keep`` accepts (``take``, ``skip``).

        With lineage (``consuming``), the first element kept also stands for
        the keys of those skipped before it, as one at a time.
        """
        skipped = 0  # keys of the elements skipped
        while self._stop is None or self._position < self._stop:
            if self._stop is not None:
                limit = min(limit, self._stop - self._position)
            block = self._input.next_block(limit)
            if block is None or not block.n:
                return block
            lo, self._position = self._position, self._position + block.n
            first = self.first_kept(lo)
            if first >= self._position:
                skipped += block.keys(block.n)
                continue
            if first > lo:
                skipped += block.keys(first - lo)
                block = block.part(first - lo, block.n)
            return block.claiming(skipped)
        return END

    def first_kept(self, position: int) -> int:
        """The first position at or after ``position`` that ``keep`` accepts."""
        return position

    def get_state(self) -> dict[str, Any]:
        return {"input": self._input.get_state(), "position": self._position}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._position = state["position"]


class Take(Op):
    name = "take"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        n, count = inputs[0], node.args["count"]
        if count < 0 or n == UNKNOWN_CARDINALITY:
            return n
        return int(count if n == INFINITE_CARDINALITY else min(n, count))

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        stop = None if node.args["count"] < 0 else node.args["count"]
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _PositionIterator(source, stop),
        )


class _SkipIterator(_PositionIterator):
    def __init__(self, source: DatasetIterator, count: int) -> None:
        super().__init__(source, None)
        self._count = count

    def keep(self, position: int) -> bool:
        return 0 <= self._count <= position

    def first_kept(self, position: int) -> int:
        return sys.maxsize if self._count < 0 else max(position, self._count)


class Skip(Op):
    name = "skip"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        n, count = inputs[0], node.args["count"]
        if n < 0:
            return n
        return 0 if count < 0 else max(0, n - count)

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        count = node.args["count"]
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _SkipIterator(source, count),
        )


class _ShardIterator(_PositionIterator):
    def __init__(self, source: DatasetIterator, num_shards: int, index: int) -> None:
        super().__init__(source, None)
        self._num_shards, self._index = num_shards, index

    def keep(self, position: int) -> bool:
        return position % self._num_shards == self._index

    def next_block(self, limit: int) -> Block | None:
        """None: a shard's elements are not consecutive (one at a time)."""
        return None


class Shard(Op):
    name = "shard"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        n, shards, index = inputs[0], node.args["num_shards"], node.args["index"]
        if n < 0 or SHARD_HINT in (shards, index):
            return UNKNOWN_CARDINALITY if n >= 0 else n
        return int(n // shards + (1 if index < n % shards else 0))

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        num_shards, index = node.args["num_shards"], node.args["index"]
        if SHARD_HINT in (num_shards, index):
            if ctx.shard_hint is None:
                raise FailedPreconditionError(
                    "shard(SHARD_HINT, SHARD_HINT) only runs on a worker under "
                    "ShardingPolicy.HINT, which fills in the worker count and index"
                )
            num_shards, index = ctx.shard_hint
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _ShardIterator(source, num_shards, index),
        )
