"""``map``, ``filter`` and ``ignore_errors``; ``map`` optionally on a thread pool.

``map(vectorized=True)`` and ``filter`` pass their input's blocks on
(``next_block``): a vectorized ``fn`` runs once on a block's columns, a
predicate per element of it and the block keeps the elements it let through.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.block import Block
from zmqdata._dataset.constants import UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IgnoredErrors,
    IterContext,
    Reorder,
    UnaryIterator,
    consuming,
    expands_below,
)
from zmqdata._dataset.node import Node, Op, call_unpacked, make_iterator
from zmqdata._dataset.ops._threads import resolve_parallelism
from zmqdata._dataset.profile import label
from zmqdata._wire.lineage import EMPTY, join
from zmqdata.errors import InvalidArgumentError

logger = logging.getLogger(__name__)


class Map(Op):
    name = "map"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        source = make_iterator(node.inputs[0], ctx)
        fn, parallelism = node.args["fn"], node.args["num_parallel_calls"]
        op, vectorized = label(node), node.args.get("vectorized", False)
        if parallelism is None and vectorized:
            return _VectorizedMapIterator(source, _Columns(fn, op), ctx.lineage)
        if parallelism is None:
            kind = _LineageMapIterator if ctx.lineage else _MapIterator
            return kind(source, fn, op)
        fn = fn if ctx.profile is None else ctx.profile.busy(node, fn)
        return _ParallelMapIterator(
            source,
            fn,
            op,
            resolve_parallelism(parallelism),
            node.args["deterministic"],
            ctx.lineage,
            expands_below(node.inputs[0]),
            _Columns(fn, op) if vectorized else None,
        )


class _MapIterator(UnaryIterator):
    def __init__(self, source: DatasetIterator, fn: Any, op: str) -> None:
        super().__init__(source)
        self._fn, self._op = fn, op

    def __next__(self) -> Any:
        return call_unpacked(self._fn, next(self._input), self._op)


class _LineageMapIterator(_MapIterator):
    def __next__(self) -> Any:
        element = next(self._input)
        self.lineage = self._input.lineage
        return call_unpacked(self._fn, element, self._op)


class _Columns:
    """A vectorized ``fn``: from a structure of columns to one of as many rows each.

    On a block it runs once on its columns; on one element, on the columns
    of a block of one (``leaf[None]``), its result cut back out.
    """

    def __init__(self, fn: Any, op: str) -> None:
        self._fn, self._op = fn, op

    def block(self, block: Block) -> Block:
        """The block ``fn`` makes of ``block`` (standing for the same keys)."""
        arrays = [np.asarray(column) for column in block.columns]  # text lists too
        columns = structure.pack_as(block.first, arrays)
        out = self._call(columns, block.n)
        leaves = structure.flatten(out)
        return Block(
            structure.pack_as(out, [leaf[0] for leaf in leaves]),
            leaves,
            block.n,
            block.widths,
        )

    def element(self, element: Any) -> Any:
        """The element ``fn`` makes of ``element``."""
        columns = structure.map_leaves(lambda leaf: np.asarray(leaf)[None], element)
        return structure.map_leaves(lambda column: column[0], self._call(columns, 1))

    def _call(self, columns: Any, n: int) -> Any:
        """``fn`` of ``columns`` (``n`` rows), its leaves as arrays of ``n`` rows."""
        out = structure.map_leaves(
            np.asarray, call_unpacked(self._fn, columns, self._op)
        )
        lengths = [
            leaf.shape[0] if leaf.ndim else None for leaf in structure.flatten(out)
        ]
        if any(length != n for length in lengths):
            raise InvalidArgumentError(
                f"{self._op} (vectorized) returned columns of lengths {lengths} for "
                f"{n} elements: a vectorized fn returns one value per element along "
                "axis 0 of each column (None: a scalar)"
            )
        return out


class _VectorizedMapIterator(UnaryIterator):
    """``map(vectorized=True)``: ``fn`` on a block's columns at once, else per element."""

    def __init__(
        self, source: DatasetIterator, columns: _Columns, lineage: bool
    ) -> None:
        super().__init__(source)
        self._columns, self._lineage = columns, lineage

    def __next__(self) -> Any:
        element = next(self._input)
        if self._lineage:
            self.lineage = self._input.lineage
        return self._columns.element(element)

    def next_block(self, limit: int) -> Block | None:
        block = self._input.next_block(limit)
        if block is None or not block.n:
            return block
        if self._lineage:
            self.lineage = self._input.lineage
        return self._columns.block(block)


class _ParallelMapIterator(DatasetIterator):
    """Keeps ``parallelism`` calls in flight; yields in input order if deterministic.

    Its position can't be saved: calls in flight have consumed input already.
    With ``lineage``, each call's input lineage is kept with its future, and
    released when it is returned (in input order below an op that expands:
    ``Reorder``).
    """

    def __init__(
        self,
        source: DatasetIterator,
        fn: Any,
        op: str,
        parallelism: int,
        deterministic: bool | None,
        lineage: bool = False,
        expands: bool = False,
        columns: _Columns | None = None,
    ) -> None:
        self._input = source
        self._fn, self._op = fn, op
        self._columns = columns
        self._parallelism = parallelism
        self._ordered = deterministic is not False
        self._pool = ThreadPoolExecutor(parallelism, thread_name_prefix="zmqdata-map")
        self._pending: deque[Future[Any]] = deque()
        self._exhausted = False
        in_read_order = self._ordered or expands
        self._order = Reorder(in_read_order) if lineage else None
        self._numbers: dict[Future[Any], int] = {}

    def _fill(self) -> None:
        while not self._exhausted and len(self._pending) < self._parallelism:
            try:
                element = next(self._input)
            except StopIteration:
                self._exhausted = True
                return
            except Exception as error:  # re-raised in order by __next__
                failed: Future[Any] = Future()
                failed.set_exception(error)
                self._pending.append(failed)
                if self._order is not None:
                    self._numbers[failed] = self._order.enter(EMPTY)
                return
            if self._columns is None:
                future = self._pool.submit(call_unpacked, self._fn, element, self._op)
            else:
                future = self._pool.submit(self._columns.element, element)
            self._pending.append(future)
            if self._order is not None:
                self._numbers[future] = self._order.enter(self._input.lineage)

    def __next__(self) -> Any:
        self._fill()
        if not self._pending:
            raise StopIteration
        if self._ordered:
            future = self._pending.popleft()
        else:
            done, _ = wait(self._pending, return_when=FIRST_COMPLETED)
            future = next(f for f in self._pending if f in done)
            self._pending.remove(future)
        if self._order is not None:
            self.lineage = self._order.leave(self._numbers.pop(future))
        return future.result()

    def next_block(self, limit: int) -> Block | None:
        """A vectorized ``fn`` on a block, on this thread, while no call is in flight."""
        if self._columns is None or self._pending:
            return None
        block = self._input.next_block(limit)
        if block is None or not block.n:
            return block
        if self._order is not None:
            self.lineage = self._input.lineage
        return self._columns.block(block)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._input.close()

    def __del__(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Filter(Op):
    name = "filter"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return 0 if inputs[0] == 0 else UNKNOWN_CARDINALITY

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        predicate, op = node.args["predicate"], label(node)
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _FilterIterator(source, predicate, op, ctx.lineage),
        )


class _FilterIterator(UnaryIterator):
    """The elements ``predicate`` lets through; a block keeps those of its elements.

    With ``lineage`` a kept element of a block stands for its keys and those
    of the elements dropped before it, the last also for those after it
    (``widths``); a block that keeps none is skipped, its keys claimed by the
    next one's first element.
    """

    def __init__(
        self, source: DatasetIterator, predicate: Any, op: str, lineage: bool = False
    ) -> None:
        super().__init__(source)
        self._predicate, self._op = predicate, op
        self._lineage = lineage

    def __next__(self) -> Any:
        while True:
            element = next(self._input)
            if self._keeps(element):
                return element

    def next_block(self, limit: int) -> Block | None:
        dropped = 0  # keys of the blocks that kept nothing
        while True:
            block = self._input.next_block(limit)
            if block is None or not block.n:
                return block
            keep = np.fromiter(map(self._keeps, block.rows()), np.bool_, block.n)
            kept = np.flatnonzero(keep)
            if len(kept):
                break
            dropped += block.keys(block.n)
        if len(kept) == block.n and not dropped:
            return block
        widths = _kept_widths(block, kept, dropped) if self._lineage else None
        return block.select(kept, widths)

    def _keeps(self, element: Any) -> bool:
        """The predicate's verdict on ``element`` (a scalar bool, or raises)."""
        verdict = np.asarray(call_unpacked(self._predicate, element, self._op))
        if verdict.shape != () or verdict.dtype != np.bool_:
            raise TypeError(
                "filter predicate must return a scalar bool, got "
                f"{verdict.dtype} with shape {verdict.shape}"
            )
        return bool(verdict)


def _kept_widths(block: Block, kept: np.ndarray, before: int) -> np.ndarray:
    """The keys each kept element of ``block`` stands for (``before``: skipped blocks').

    Its own and those of the elements dropped before it; the last also those after it.
    """
    ends = np.cumsum(block.own_widths())
    through = ends[kept]  # the keys up to each kept element, itself included
    widths: np.ndarray = np.diff(through, prepend=0)
    widths[0] += before
    widths[-1] += ends[-1] - through[-1]
    return widths


class IgnoreErrors(Filter):
    """Drops what failed: a filter (in cardinality) whose predicate is "it made"."""

    name = "ignore_errors"

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _IgnoreErrorsIterator(
            make_iterator(node.inputs[0], ctx), ctx.ignored, node.args["log_warning"]
        )


class _IgnoreErrorsIterator(UnaryIterator):
    """Drops the elements whose making raised; counts them in ``ignored``.

    An element that made it claims the keys of the failures before it (where
    its input said what they stood for: ``DatasetIterator.lineage``).
    """

    def __init__(
        self, source: DatasetIterator, ignored: IgnoredErrors, log_warning: bool
    ) -> None:
        super().__init__(source)
        self._ignored, self._log_warning = ignored, log_warning

    def __next__(self) -> Any:
        failed = EMPTY
        while True:
            self._input.lineage = EMPTY  # unless a failure says what it stood for
            try:
                element = next(self._input)
            except StopIteration:
                raise
            except Exception as error:
                failed = join(failed, self._input.lineage)
                self._ignored.add(error)
                if self._log_warning:
                    logger.warning("ignore_errors: skipped an element: %s", error)
                continue
            self.lineage = join(failed, self._input.lineage)
            return element
