"""Source ops: range, from_tensor_slices, from_tensors, from_generator, list_files.

Splittable sources (range, from_tensor_slices, list_files) can list their
splits and read only the splits a ``SplitProvider`` hands them: index ranges
``[lo, hi]`` (``list_files``: one file each, ``[k, k + 1]``), or ``[lo, hi,
base]`` where the keys of their elements (their lineage) start at ``base``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.block import END, Block
from zmqdata._dataset.constants import UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import DatasetIterator, IterContext, Split, SplitProvider
from zmqdata._dataset.node import Node, Op
from zmqdata.errors import InvalidArgumentError


class SplittableSource(Op):
    """A source whose elements can be read split by split."""

    splittable = True

    def num_splits(self, node: Node, max_split_size: int) -> int:
        """How many splits of at most ``max_split_size`` elements the source has."""
        return -(-self.cardinality(node, []) // max_split_size)

    def split_at(self, node: Node, max_split_size: int, index: int) -> Split:
        """Split ``index`` (of ``num_splits``), computed without listing the others."""
        lo = index * max_split_size
        return [lo, min(lo + max_split_size, self.cardinality(node, []))]

    def splits(self, node: Node, max_split_size: int) -> list[Split]:
        """Every split of the source, in order, each at most ``max_split_size`` long."""
        return [
            self.split_at(node, max_split_size, k)
            for k in range(self.num_splits(node, max_split_size))
        ]

    def read(self, node: Node, index: int) -> Any:
        """Element ``index`` of the whole source."""
        raise NotImplementedError

    def read_block(self, node: Node, lo: int, hi: int) -> Block | None:
        """Elements ``lo`` to ``hi`` (excluded, ``lo < hi``) as one block; None: not in bulk."""
        return None

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        provider = ctx.provider_for(node)
        if provider is None:
            return SplitIterator(self, node, WholeSource(self.cardinality(node, [])))
        kind = _LineageSplitIterator if ctx.lineage else SplitIterator
        return kind(self, node, provider)


class WholeSource(SplitProvider):
    """The one split covering a whole source, once per repetition."""

    def __init__(self, size: int) -> None:
        self._split: Split | None = [0, size]
        self._size = size

    def next_split(self) -> Split | None:
        split, self._split = self._split, None
        return split

    def reset(self) -> None:
        self._split = [0, self._size]

    def get_state(self) -> Any:
        return self._split

    def set_state(self, state: Any) -> None:
        self._split = state


class SplitIterator(DatasetIterator):
    """Reads index splits ``[lo, hi]`` (or ``[lo, hi, base]``) of an indexable source."""

    def __init__(
        self, op: SplittableSource, node: Node, provider: SplitProvider
    ) -> None:
        self._op, self._node, self._provider = op, node, provider
        self._split: Split | None = None
        self._next_index = 0

    def _advance(self) -> bool:
        """Moves to a split with indices left; False at the end."""
        while self._split is None or self._next_index >= self._split[1]:
            self._split = self._provider.next_split()
            if self._split is None:
                return False
            self._next_index = self._split[0]
        return True

    def __next__(self) -> Any:
        index, split = self._next_index, self._split
        if split is None or index >= split[1]:  # the hot path skips the call
            if not self._advance():
                raise StopIteration
            index = self._next_index
        self._next_index = index + 1
        return self._op.read(self._node, index)

    def next_block(self, limit: int) -> Block | None:
        if not self._advance():
            return END
        assert self._split is not None  # _advance found one
        lo = self._next_index
        hi = min(self._split[1], lo + limit)
        block = self._op.read_block(self._node, lo, hi)
        if block is not None:
            self._next_index = hi
        return block

    def get_state(self) -> dict[str, Any]:
        return {
            "split": self._split,
            "next_index": self._next_index,
            "provider": self._provider.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._split, self._next_index = state["split"], state["next_index"]
        self._provider.set_state(state["provider"])


def base_of(split: Split) -> int:
    """The key of index 0 in ``split``: ``[lo, hi, base]`` or ``[lo, hi]`` (0)."""
    return int(split[2]) if len(split) > 2 else 0


class _LineageSplitIterator(SplitIterator):
    """A ``SplitIterator`` whose elements stand for their own keys, ``base + index``."""

    _base = 0
    """The key of index 0 of the current split."""

    def __next__(self) -> Any:  # SplitIterator's, with the key: the hot path of W1
        index, split = self._next_index, self._split
        if split is None or index >= split[1]:
            if not self._advance():
                raise StopIteration
            index, self._base = self._next_index, base_of(self._split)
        self._next_index = index + 1
        key = self._base + index
        self.lineage = (key, key + 1)
        return self._op.read(self._node, index)

    def next_block(self, limit: int) -> Block | None:
        block = super().next_block(limit)
        if block is not None and block.n:
            hi = base_of(self._split) + self._next_index
            self.lineage = (hi - block.n, hi)
        return block

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._base = 0 if self._split is None else base_of(self._split)


class Range(SplittableSource):
    name = "range"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        start, stop, step = node.args["start"], node.args["stop"], node.args["step"]
        return int(max(0, -(-(stop - start) // step)))

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return structure.TensorSpec((), np.dtype(np.int64))

    def read(self, node: Node, index: int) -> Any:
        return np.int64(node.args["start"] + index * node.args["step"])

    def read_block(self, node: Node, lo: int, hi: int) -> Block:
        start, step = node.args["start"], node.args["step"]
        column = np.arange(start + lo * step, start + hi * step, step, dtype=np.int64)
        return Block(column[0], [column], hi - lo)


class FromTensorSlices(SplittableSource):
    name = "from_tensor_slices"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return int(node.args["size"])

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return structure.map_leaves(
            lambda a: structure.TensorSpec(tuple(a.shape[1:]), a.dtype),
            node.args["tensors"].value,
        )

    def read(self, node: Node, index: int) -> Any:
        return structure.slice_at(node.args["tensors"].value, index)

    def read_block(self, node: Node, lo: int, hi: int) -> Block:
        tensors = node.args["tensors"].value
        columns = [np.asarray(leaf)[lo:hi] for leaf in structure.flatten(tensors)]
        return Block.of(tensors, columns)


class ListFiles(SplittableSource):
    name = "list_files"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return len(node.args["files"])

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return structure.TensorSpec((), str)

    def num_splits(self, node: Node, max_split_size: int) -> int:
        return len(node.args["files"])

    def split_at(self, node: Node, max_split_size: int, index: int) -> Split:
        return [index, index + 1]

    def read(self, node: Node, index: int) -> Any:
        return node.args["files"][index]

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        if ctx.provider_for(node) is not None:
            return super().iterator(node, ctx)
        if node.args["shuffle"]:
            return _ShuffledFilesIterator(node, ctx)
        return _ListIterator(list(node.args["files"]))


class _ListIterator(DatasetIterator):
    """Yields the items of a list, in order, with the index as state."""

    def __init__(self, items: list[Any]) -> None:
        self._items, self._index = items, 0

    def __next__(self) -> Any:
        if self._index >= len(self._items):
            raise StopIteration
        self._index += 1
        return self._items[self._index - 1]

    def get_state(self) -> dict[str, Any]:
        return {"index": self._index}

    def set_state(self, state: dict[str, Any]) -> None:
        self._index = state["index"]


class _ShuffledFilesIterator(_ListIterator):
    """The files in an order drawn per epoch; the order is part of the state."""

    def __init__(self, node: Node, ctx: IterContext) -> None:
        self._node, self._ctx = node, ctx
        seed, files = node.args["seed"], node.args["files"]
        self._epoch = ctx.next_epoch(node)
        rng = np.random.default_rng(None if seed is None else [seed, *self._epoch])
        self._order = [int(i) for i in rng.permutation(len(files))]
        super().__init__([files[i] for i in self._order])

    def get_state(self) -> dict[str, Any]:
        return {
            "index": self._index,
            "order": list(self._order),
            "epoch": list(self._epoch),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        files = self._node.args["files"]
        self._order = [int(i) for i in state["order"]]
        self._items, self._index = [files[i] for i in self._order], state["index"]
        self._epoch = (int(state["epoch"][0]), int(state["epoch"][1]))
        self._ctx.restore_epoch(self._node, self._epoch)


class FromTensors(Op):
    name = "from_tensors"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return 1

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return structure.spec_of(node.args["tensors"].value)

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _ListIterator([node.args["tensors"].value])


class SourceRef:
    """A random-access object in a pipeline: called, it returns the object.

    A callable, so the pipeline's bytes carry it by cloudpickle, as user
    functions travel (and the dispatcher, which loads no user code, does not
    unpickle it).
    """

    def __init__(self, source: Any) -> None:
        self.source = source

    def __call__(self) -> Any:
        return self.source


class FromSource(SplittableSource):
    """``source[i]`` for ``i < len(source)``: any ``__len__`` + ``__getitem__`` object."""

    name = "from_source"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return int(node.args["size"])

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None

    def read(self, node: Node, index: int) -> Any:
        return node.args["source"]()[index]


class FromGenerator(Op):
    name = "from_generator"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _GeneratorIterator(node)


class _GeneratorIterator(DatasetIterator):
    """Calls the generator function anew; restores by replaying ``count`` items."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._count = 0
        self._items = self._start()

    def _start(self) -> Iterator[Any]:
        return iter(self._node.args["fn"](*self._node.args["args"].value))

    def __next__(self) -> Any:
        item = next(self._items)
        self._count += 1
        return item

    def get_state(self) -> dict[str, Any]:
        return {"count": self._count}

    def set_state(self, state: dict[str, Any]) -> None:
        self._items, self._count = self._start(), 0
        for _ in range(state["count"]):
            next(self)


def find_split_source(root: Node) -> Node:
    """The splittable source a pipeline reads through single-input ops.

    Raises ``InvalidArgumentError`` naming the op that prevents splitting.
    """
    node = root
    while not node.definition.splittable:
        if len(node.inputs) != 1:
            what = "a source" if not node.inputs else f"{len(node.inputs)} inputs"
            raise InvalidArgumentError(
                f"cannot split the pipeline for DYNAMIC/FILE sharding: op {node.op!r} "
                f"has {what}; a splittable pipeline reads one range, "
                "from_tensor_slices or list_files source through single-input ops"
            )
        node = node.inputs[0]
    return node
