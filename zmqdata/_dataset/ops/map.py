"""``map``, ``filter`` and ``ignore_errors``; ``map`` optionally on a thread pool."""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

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

logger = logging.getLogger(__name__)


class Map(Op):
    name = "map"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        source = make_iterator(node.inputs[0], ctx)
        fn, parallelism = node.args["fn"], node.args["num_parallel_calls"]
        if parallelism is None:
            kind = _LineageMapIterator if ctx.lineage else _MapIterator
            return kind(source, fn, label(node))
        return _ParallelMapIterator(
            source,
            fn if ctx.profile is None else ctx.profile.busy(node, fn),
            label(node),
            resolve_parallelism(parallelism),
            node.args["deterministic"],
            ctx.lineage,
            expands_below(node.inputs[0]),
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
    ) -> None:
        self._input = source
        self._fn, self._op = fn, op
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
            future = self._pool.submit(call_unpacked, self._fn, element, self._op)
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
            lambda source: _FilterIterator(source, predicate, op),
        )


class _FilterIterator(UnaryIterator):
    def __init__(self, source: DatasetIterator, predicate: Any, op: str) -> None:
        super().__init__(source)
        self._predicate, self._op = predicate, op

    def __next__(self) -> Any:
        while True:
            element = next(self._input)
            verdict = np.asarray(call_unpacked(self._predicate, element, self._op))
            if verdict.shape != () or verdict.dtype != np.bool_:
                raise TypeError(
                    "filter predicate must return a scalar bool, got "
                    f"{verdict.dtype} with shape {verdict.shape}"
                )
            if verdict:
                return element


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
