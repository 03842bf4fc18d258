"""Ops over several inputs or adding to each element: zip, concatenate, enumerate."""

from __future__ import annotations

from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    UnaryIterator,
    consuming,
)
from zmqdata._dataset.node import Node, Op, make_iterator


def _pack(keys: list[str] | None, values: list[Any]) -> Any:
    return tuple(values) if keys is None else dict(zip(keys, values, strict=True))


class Zip(Op):
    name = "zip"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if UNKNOWN_CARDINALITY in inputs:
            return UNKNOWN_CARDINALITY
        finite = [n for n in inputs if n >= 0]
        return min(finite) if finite else INFINITE_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return (
            None if any(s is None for s in inputs) else _pack(node.args["keys"], inputs)
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _ZipIterator(
            [make_iterator(n, ctx) for n in node.inputs], node.args["keys"]
        )


class _ZipIterator(DatasetIterator):
    def __init__(self, sources: list[DatasetIterator], keys: list[str] | None) -> None:
        self._inputs, self._keys = sources, keys

    def __next__(self) -> Any:
        return _pack(self._keys, [next(source) for source in self._inputs])

    def get_state(self) -> dict[str, Any]:
        return {"inputs": [source.get_state() for source in self._inputs]}

    def set_state(self, state: dict[str, Any]) -> None:
        for source, saved in zip(self._inputs, state["inputs"], strict=True):
            source.set_state(saved)

    def close(self) -> None:
        for source in self._inputs:
            source.close()


class Concatenate(Op):
    name = "concatenate"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if INFINITE_CARDINALITY in inputs:
            return INFINITE_CARDINALITY
        if UNKNOWN_CARDINALITY in inputs:
            return UNKNOWN_CARDINALITY
        return sum(inputs)

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return structure.common_spec(inputs[0], inputs[1])

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _ConcatenateIterator(node, ctx)


class _ConcatenateIterator(DatasetIterator):
    def __init__(self, node: Node, ctx: IterContext) -> None:
        self._node, self._ctx = node, ctx
        self._index = 0
        self._current: DatasetIterator | None = make_iterator(node.inputs[0], ctx)

    def __next__(self) -> Any:
        while self._current is not None:
            try:
                return next(self._current)
            except StopIteration:
                self._switch(self._index + 1)
        raise StopIteration

    def _switch(self, index: int) -> None:
        if self._current is not None:
            self._current.close()
        self._index = index
        inputs = self._node.inputs
        self._current = (
            make_iterator(inputs[index], self._ctx) if index < len(inputs) else None
        )

    def get_state(self) -> dict[str, Any]:
        current = None if self._current is None else self._current.get_state()
        return {"index": self._index, "current": current}

    def set_state(self, state: dict[str, Any]) -> None:
        self._switch(state["index"])
        if self._current is not None:
            self._current.set_state(state["current"])

    def close(self) -> None:
        if self._current is not None:
            self._current.close()


class Enumerate(Op):
    name = "enumerate"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        if inputs[0] is None:
            return None
        return (structure.TensorSpec((), np.dtype(np.int64)), inputs[0])

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        start = node.args["start"]
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _EnumerateIterator(source, start),
        )


class _EnumerateIterator(UnaryIterator):
    def __init__(self, source: DatasetIterator, start: int) -> None:
        super().__init__(source)
        self._next = start

    def __next__(self) -> Any:
        element = next(self._input)
        self._next += 1
        return (np.int64(self._next - 1), element)

    def get_state(self) -> dict[str, Any]:
        return {"input": self._input.get_state(), "next": self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._next = state["next"]
