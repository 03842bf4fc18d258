"""``bucket_by_sequence_length``: padded batches of elements of similar length.

tf.data's op: an element of length ``n`` goes to bucket ``i``, the number of
boundaries ``<= n``; a bucket that holds its batch size goes out as one padded
batch (``padding.pad_batch``), and at the end of the input the partial
buckets go out in bucket order (dropped with ``drop_remainder``).

The held elements are the iterator's state; with lineage, a batch claims its
elements' keys (``Reorder``: in read order below an op that expands).
"""

from __future__ import annotations

import bisect
import itertools
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
from zmqdata._dataset.node import Node, Op, call_unpacked, make_iterator
from zmqdata._dataset.ops.batch import _array_dtype
from zmqdata._dataset.ops.padding import (
    check_spec,
    constant,
    pad_batch,
    padded_spec,
    shapes_arg,
    values_arg,
)
from zmqdata._dataset.profile import label
from zmqdata._dataset.validate import check_callable, check_int
from zmqdata._wire.lineage import EMPTY
from zmqdata.errors import InvalidArgumentError

NAME = "bucket_by_sequence_length"


def build(
    parent: Node,
    spec: Any,
    element_length_func: Any,
    bucket_boundaries: Any,
    bucket_batch_sizes: Any,
    padded_shapes: Any,
    padding_values: Any,
    pad_to_bucket_boundary: Any,
    no_padding: Any,
    drop_remainder: Any,
) -> Node:
    """A ``bucket_by_sequence_length`` node, its arguments checked.

    With ``pad_to_bucket_boundary`` and no ``padded_shapes``, the padded
    shapes are the element spec's (where known): its unknown sizes are the
    ones padded to the boundary.
    """
    boundaries, sizes = _buckets(bucket_boundaries, bucket_batch_sizes)
    flags = {
        "pad_to_bucket_boundary": pad_to_bucket_boundary,
        "no_padding": no_padding,
        "drop_remainder": drop_remainder,
    }
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{NAME} {flag} must be a bool, got {value!r}")
    if pad_to_bucket_boundary and not boundaries:
        raise ValueError(
            f"{NAME}: pad_to_bucket_boundary=True needs bucket_boundaries, got []"
        )
    shapes = shapes_arg(padded_shapes)
    if shapes is None and pad_to_bucket_boundary and spec is not None:
        shapes = shapes_arg(structure.map_leaves(lambda s: list(s.shape), spec))
    values = values_arg(padding_values)
    if not no_padding:
        check_spec(NAME, spec, shapes, values, filled=pad_to_bucket_boundary)
    args = {
        "element_length_func": check_callable(
            f"{NAME} element_length_func", element_length_func
        ),
        "bucket_boundaries": boundaries,
        "bucket_batch_sizes": sizes,
        "padded_shapes": shapes,
        "padding_values": values,
        **flags,
    }
    return Node(NAME, args, (parent,))


def _buckets(
    bucket_boundaries: Any, bucket_batch_sizes: Any
) -> tuple[list[int], list[int]]:
    """The boundaries and batch sizes, checked (one more size than boundaries)."""
    boundaries = _ints(f"{NAME} bucket_boundaries", bucket_boundaries)
    sizes = _ints(f"{NAME} bucket_batch_sizes", bucket_batch_sizes)
    if len(sizes) != len(boundaries) + 1:
        raise ValueError(
            f"{NAME}: len(bucket_batch_sizes) must be len(bucket_boundaries) + 1, "
            f"got {len(sizes)} batch sizes {sizes} for {len(boundaries)} "
            f"boundaries {boundaries}"
        )
    if any(b <= a for a, b in itertools.pairwise(boundaries)):
        raise ValueError(
            f"{NAME} bucket_boundaries must be strictly increasing, got {boundaries}"
        )
    return boundaries, sizes


def _ints(name: str, values: Any) -> list[int]:
    """A list of ints >= 1, each checked."""
    if not isinstance(values, list | tuple | np.ndarray):
        raise TypeError(f"{name} must be a list of ints, got {values!r}")
    return [check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(values)]


class BucketBySequenceLength(Op):
    name = NAME

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if inputs[0] in (0, INFINITE_CARDINALITY):
            return inputs[0]
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        if inputs[0] is None:
            return None
        if node.args["no_padding"]:
            return structure.map_leaves(
                lambda s: structure.TensorSpec((None, *s.shape), _array_dtype(s.dtype)),
                inputs[0],
            )
        return padded_spec(
            inputs[0],
            constant(node.args["padded_shapes"]),
            constant(node.args["padding_values"]),
            None,
            filled=node.args["pad_to_bucket_boundary"],
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        in_read_order = expands_below(node.inputs[0]) if ctx.lineage else None
        return _BucketIterator(make_iterator(node.inputs[0], ctx), node, in_read_order)


class _BucketIterator(GroupingIterator):
    """Buckets of input elements; ``in_read_order`` (not None) tracks lineage."""

    def __init__(
        self, source: DatasetIterator, node: Node, in_read_order: bool | None
    ) -> None:
        super().__init__(source, in_read_order)
        args = node.args
        self._length_of = args["element_length_func"]
        self._op = label(node)
        self._boundaries: list[int] = list(args["bucket_boundaries"])
        self._sizes: list[int] = list(args["bucket_batch_sizes"])
        self._shapes = constant(args["padded_shapes"])
        self._values = constant(args["padding_values"])
        self._to_boundary: bool = args["pad_to_bucket_boundary"]
        self._no_padding: bool = args["no_padding"]
        self._drop_remainder: bool = args["drop_remainder"]
        self._buckets: list[list[Any]] = [[] for _ in self._sizes]
        self._numbers: list[list[int]] = [[] for _ in self._sizes]

    def __next__(self) -> Any:
        while not self._input_done:
            read = self._read(self._bucket_of)
            if read is None:
                break
            element, bucket, number = read
            self._buckets[bucket].append(element)
            if number is not None:
                self._numbers[bucket].append(number)
            if len(self._buckets[bucket]) == self._sizes[bucket]:
                return self._batch(bucket)
        if not self._drop_remainder:
            for bucket, held in enumerate(self._buckets):
                if held:
                    return self._batch(bucket)
        raise StopIteration

    def _bucket_of(self, element: Any) -> int:
        length = call_unpacked(self._length_of, element, self._op)
        value = np.asarray(length)
        if value.shape != () or value.dtype.kind not in "iu":
            raise TypeError(
                "bucket_by_sequence_length element_length_func must return an "
                f"integer scalar, got {length!r}"
            )
        bucket = bisect.bisect_right(self._boundaries, int(value))
        if self._to_boundary and bucket == len(self._boundaries):
            raise InvalidArgumentError(
                f"bucket_by_sequence_length: an element of length {int(value)} is "
                f"not below the last bucket boundary {self._boundaries[-1]} (with "
                "pad_to_bucket_boundary=True, elements must have length < "
                "bucket_boundaries[-1])"
            )
        return bucket

    def _batch(self, bucket: int) -> Any:
        elements, self._buckets[bucket] = self._buckets[bucket], []
        self._claim(self._numbers[bucket])
        self._numbers[bucket] = []
        if self._no_padding:
            return structure.stack(elements)
        fill = self._boundaries[bucket] - 1 if self._to_boundary else None
        return pad_batch(elements, self._shapes, self._values, fill)

    def get_state(self) -> dict[str, Any]:
        return {
            "input": self._input.get_state(),
            "buckets": [list(held) for held in self._buckets],
            "input_done": self._input_done,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._buckets = [list(held) for held in state["buckets"]]
        self._input_done = state["input_done"]
        self._restart_order()
        if self._order is not None:
            self._numbers = [
                [self._order.enter(EMPTY) for _ in held] for held in self._buckets
            ]
