"""``repeat``: re-runs its input ``count`` times (forever for None)."""

from __future__ import annotations

from typing import Any

from zmqdata._dataset.block import END, Block
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, Op, make_iterator


class Repeat(Op):
    name = "repeat"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        n, count = inputs[0], node.args["count"]
        if count < 0:
            return 0 if n == 0 else INFINITE_CARDINALITY
        if count == 0 or n == 0:
            return 0
        if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
            return n
        return int(n * count)

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return (_LineageRepeatIterator if ctx.lineage else _RepeatIterator)(node, ctx)


class _RepeatIterator(DatasetIterator):
    """Each new pass resets the split provider when the split source is below."""

    def __init__(self, node: Node, ctx: IterContext) -> None:
        self._node, self._ctx = node, ctx
        self._count = node.args["count"]
        self._passes_done = 0
        self._produced_this_pass = 0
        self._input: DatasetIterator | None = (
            make_iterator(node.inputs[0], ctx) if self._count != 0 else None
        )

    def __next__(self) -> Any:
        while self._input is not None:
            try:
                element = next(self._input)
            except StopIteration:
                self._next_pass()
                continue
            self._produced_this_pass += 1
            return element
        raise StopIteration

    def next_block(self, limit: int) -> Block | None:
        """The input's blocks, pass after pass (None where the input gives none)."""
        while self._input is not None:
            block = self._input.next_block(limit)
            if block is None:
                return None
            if block.n:
                self._produced_this_pass += block.n
                return block
            self._next_pass()
        return END

    def _next_pass(self) -> None:
        assert self._input is not None
        self._input.close()
        self._passes_done += 1
        split = self._reads_split_source()
        endless_and_empty = self._count < 0 and self._produced_this_pass == 0
        self._produced_this_pass = 0
        if (
            endless_and_empty and not self._may_be_empty_for_now(split)
        ) or self._passes_done == self._count:
            self._input = None
            return
        if split:
            assert self._ctx.split_provider is not None
            self._ctx.split_provider.reset()
        self._input = make_iterator(self._node.inputs[0], self._ctx)

    def _reads_split_source(self) -> bool:
        """Whether this repeat's input reads the pass's split provider."""
        source = self._ctx.split_source
        return self._ctx.split_provider is not None and any(
            n is source for n in self._node.inputs[0].walk()
        )

    def _may_be_empty_for_now(self, split: bool) -> bool:
        """Whether an empty pass may be followed by full ones.

        An endless repeat of an empty input would spin forever: tf.data ends
        it, except over a shared split provider, where an empty pass may only
        mean that other workers got this repetition's splits (it ends once the
        dispatcher heard that every worker's pass was empty: ``made_nothing``),
        and over a named service job, where it means that other consumers
        drained that iteration.
        """
        provider = self._ctx.split_provider
        if split and provider is not None and provider.shared:
            return not provider.made_nothing()
        return any(n.reads_named_job() for n in self._node.inputs[0].walk())

    def get_state(self) -> dict[str, Any]:
        return {
            "passes_done": self._passes_done,
            "produced_this_pass": self._produced_this_pass,
            "input": None if self._input is None else self._input.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._passes_done = state["passes_done"]
        self._produced_this_pass = state["produced_this_pass"]
        if state["input"] is None:
            self.close()
            self._input = None
            return
        if self._input is None:
            self._input = make_iterator(self._node.inputs[0], self._ctx)
        self._input.set_state(state["input"])

    def close(self) -> None:
        if self._input is not None:
            self._input.close()


class _LineageRepeatIterator(_RepeatIterator):
    def __next__(self) -> Any:
        element = super().__next__()
        assert self._input is not None  # it just returned an element
        self.lineage = self._input.lineage
        return element

    def next_block(self, limit: int) -> Block | None:
        block = super().next_block(limit)
        if block is not None and block.n:
            assert self._input is not None  # it just returned a block
            self.lineage = self._input.lineage
        return block
