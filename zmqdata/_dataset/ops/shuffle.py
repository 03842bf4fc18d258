"""``shuffle``: a buffer of ``buffer_size`` elements sampled uniformly (tf.data's algorithm)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    Reorder,
    UnaryIterator,
    expands_below,
)
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._wire.lineage import EMPTY

_FIXED_SEEDS: weakref.WeakKeyDictionary[Node, int] = weakref.WeakKeyDictionary()
"""Seeds drawn once per dataset for ``seed=None, reshuffle_each_iteration=False``."""


class Shuffle(Op):
    name = "shuffle"

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        seed = node.args["seed"]
        reshuffle = node.args["reshuffle_each_iteration"]
        epoch = None
        if seed is None and reshuffle:
            rng = np.random.default_rng()
        elif reshuffle:
            epoch = ctx.next_epoch(node)
            rng = np.random.default_rng([seed, *epoch])
        else:
            if seed is None:
                seed = _FIXED_SEEDS.setdefault(
                    node, int(np.random.default_rng().integers(2**63))
                )
            rng = np.random.default_rng([seed, 0])
        kind = _LineageShuffleIterator if ctx.lineage else _ShuffleIterator
        return kind(
            make_iterator(node.inputs[0], ctx),
            node.args["buffer_size"],
            rng,
            node,
            ctx,
            epoch,
        )


def _swap_pop(items: list[Any], index: int) -> Any:
    """Removes and returns ``items[index]``; the last item takes its place."""
    items[index], items[-1] = items[-1], items[index]
    return items.pop()


class _ShuffleIterator(UnaryIterator):
    def __init__(
        self,
        source: DatasetIterator,
        buffer_size: int,
        rng: np.random.Generator,
        node: Node,
        ctx: IterContext,
        epoch: tuple[int, int] | None,
    ) -> None:
        super().__init__(source)
        self._capacity = buffer_size
        self._rng = rng
        self._node, self._ctx, self._epoch = node, ctx, epoch
        self._buffer: list[Any] = []
        self._input_done = False

    def _refill(self) -> None:
        while not self._input_done and len(self._buffer) < self._capacity:
            try:
                self._buffer.append(next(self._input))
            except StopIteration:
                self._input_done = True
            else:
                self._took()

    def _took(self) -> None:
        """An element was just added to the buffer (read from the input)."""

    def __next__(self) -> Any:
        self._refill()
        if not self._buffer:
            raise StopIteration
        return _swap_pop(self._buffer, int(self._rng.integers(len(self._buffer))))

    def get_state(self) -> dict[str, Any]:
        return {
            "input": self._input.get_state(),
            "buffer": list(self._buffer),
            "rng": self._rng.bit_generator.state,
            "input_done": self._input_done,
            "epoch": None if self._epoch is None else list(self._epoch),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._buffer = list(state["buffer"])
        self._rng.bit_generator.state = state["rng"]
        self._input_done = state["input_done"]
        if state["epoch"] is not None:
            self._epoch = (int(state["epoch"][0]), int(state["epoch"][1]))
            self._ctx.restore_epoch(self._node, self._epoch)


class _LineageShuffleIterator(_ShuffleIterator):
    """Each element claims its own keys when returned.

    Below an op that expands, lineages go out in the order the elements were
    read instead (``Reorder``).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._in_read_order = expands_below(self._node.inputs[0])
        self._order = Reorder(self._in_read_order)
        self._numbers: list[int] = []

    def _took(self) -> None:
        self._numbers.append(self._order.enter(self._input.lineage))

    def __next__(self) -> Any:
        self._refill()
        if not self._buffer:
            raise StopIteration
        index = int(self._rng.integers(len(self._buffer)))
        self.lineage = self._order.leave(_swap_pop(self._numbers, index))
        return _swap_pop(self._buffer, index)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._order = Reorder(self._in_read_order)
        self._numbers = [self._order.enter(EMPTY) for _ in self._buffer]
