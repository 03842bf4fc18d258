"""The op tree a ``Dataset`` describes, and the registry of op definitions.

A ``Node`` names an op, holds its arguments (plain values, ``Constant`` data and
user functions) and its input nodes. Op definitions (``ops/``) say how to
compute cardinality and element spec and how to build an iterator.
"""

from __future__ import annotations

import abc
import copy
import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata.errors import in_op


@dataclass(frozen=True, slots=True)
class Constant:
    """A data argument (numpy arrays, nested structures) of an op."""

    value: Any


@dataclass(frozen=True, eq=False)
class Node:
    """One op of a pipeline: ``op`` name, its ``args`` and its ``inputs``."""

    op: str
    args: dict[str, Any]
    inputs: tuple[Node, ...] = ()
    _passes: itertools.count[int] = field(
        default_factory=itertools.count, init=False, repr=False
    )

    def next_pass(self) -> int:
        """Counts iterators built over this node (reshuffles differ per pass)."""
        return next(self._passes)

    def passes_started(self) -> int:
        """How many iterators have been built over this node so far."""
        return next(copy.copy(self._passes))

    def fresh(self) -> Node:
        """This pipeline anew: the same ops, arguments and functions, no pass counted.

        A worker runs each task of a dataset from one decoded copy as if it
        had decoded it for that task.
        """
        return Node(self.op, self.args, tuple(child.fresh() for child in self.inputs))

    def walk(self) -> Iterator[Node]:
        """This node and every node below it (depth first)."""
        yield self
        for child in self.inputs:
            yield from child.walk()

    def reads_named_job(self) -> bool:
        """Whether this node reads a named service job (one that others may share)."""
        return self.op == "data_service" and self.args["options"].job_name is not None

    @property
    def definition(self) -> Op:
        """The op definition registered under ``self.op``."""
        return _registry()[self.op]


class Op(abc.ABC):
    """How one kind of node behaves. Subclasses are stateless singletons."""

    name: ClassVar[str]
    splittable: ClassVar[bool] = False
    expands: ClassVar[bool] = False
    """Whether one input element can make several outputs, the last of which
    claims the input's keys (``lineage``): then outputs reordered after it
    must not claim before their siblings are out (``iterator.Reorder``)."""
    splits_alone: ClassVar[bool] = False
    """Whether a job runs it, and the ops below it, on each split alone and
    from scratch (``ops/split_runs.py``), as a 1-to-many op (a ``snapshot``:
    one chunk per split)."""
    runs_splits: ClassVar[bool] = False
    """Whether it runs its input split by split, each output claiming its own
    key (``ops/split_runs.py``): nothing below it expands for the ops above."""

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        """The node's cardinality given its inputs'; by default its input's."""
        return inputs[0]

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        """The node's element spec given its inputs'; by default its input's."""
        return inputs[0]

    def identity(self, node: Node, inputs: list[Node]) -> Node:
        """What says which data ``node`` makes, given its inputs' (``inputs``).

        By default the op, all its arguments and ``inputs``; ops leave out what
        a restore may change (``graph.data_fingerprint``).
        """
        return Node(node.op, node.args, tuple(inputs))

    @abc.abstractmethod
    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        """A fresh iterator over one pass of ``node``."""


def make_iterator(node: Node, ctx: IterContext) -> DatasetIterator:
    """Builds the iterator tree for ``node`` within pass context ``ctx``."""
    iterator = node.definition.iterator(node, ctx)
    return iterator if ctx.profile is None else ctx.profile.wrap(node, iterator)


def call_unpacked(fn: Callable[..., Any], element: Any, op: str) -> Any:
    """Calls ``fn(*element)`` for tuples and ``fn(element)`` otherwise.

    What it raises names ``op`` (``errors.in_op``): a worker sends it on.
    """
    try:
        return fn(*element) if isinstance(element, tuple) else fn(element)
    except Exception as error:
        in_op(error, op)
        raise


@functools.cache
def _registry() -> Mapping[str, Op]:
    """``ops.OPS``, imported once (it imports this module)."""
    from zmqdata._dataset.ops import OPS

    return OPS
