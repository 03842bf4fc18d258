"""DYNAMIC sharding: how the dispatcher cuts a source into splits and hands them out.

A source of ``n`` elements is cut into index ranges of ``split_size(n)``
elements (files: one each); split ``i`` is computed without listing the others.
``Splits.answer`` decides what a task's ``GetSplit`` gets, from the records
alone; the dispatcher journals the ``SplitProduced`` event it returns.

>>> import zmqdata as zd
>>> splits = Splits.of(zd.Dataset.range(1_000)._node)
>>> splits.size, splits.count(), splits.at(2)
(15, 67, [30, 45])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from zmqdata._dataset.iterator import Split
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.source import SplittableSource
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model
from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError

MAX_SPLIT_SIZE = 256
SPLITS_PER_PASS = 64
MAX_SPLITS_PER_REQUEST = 256
"""The most splits one ``GetSplit`` may ask for."""


def split_size(num_elements: int) -> int:
    """Elements per DYNAMIC split: about ``SPLITS_PER_PASS`` splits, 1..256 each."""
    return max(1, min(MAX_SPLIT_SIZE, num_elements // SPLITS_PER_PASS))


@dataclass(frozen=True)
class Splits:
    """A splittable ``source`` (a ``SplittableSource`` node) cut into splits."""

    source: Node
    size: int
    """At most this many elements per split."""

    @classmethod
    def of(cls, source: Node) -> Splits:
        """The splits of ``source``, sized by its cardinality."""
        return cls(source, split_size(source.definition.cardinality(source, [])))

    @property
    def _op(self) -> SplittableSource:
        return cast(SplittableSource, self.source.definition)  # see find_split_source

    def count(self) -> int:
        """How many splits one pass over the source has."""
        return int(self._op.num_splits(self.source, self.size))

    def at(self, index: int) -> Split:
        """Split ``index`` (``[lo, hi]``, or a file path)."""
        return self._op.split_at(self.source, self.size, index)

    def answer(
        self, iteration: model.Iteration, task: model.Task, request: m.GetSplit
    ) -> tuple[m.GetSplitReply, ev.SplitProduced | None]:
        """The reply to ``task``'s ``request``, and the splits it hands out (if any).

        A request gets up to ``request.max_splits`` consecutive splits. Requests
        of one task are numbered: one sent again gets the splits it got the
        first time (nothing new is handed out), an older one is refused. A
        later repetition starts its splits from 0; an earlier one is over, as
        is one whose splits are all handed out (``end_of_splits``).
        """
        last = task.last_split
        if last is not None and request.request_id <= last[0]:
            if request.request_id < last[0]:
                raise FailedPreconditionError(
                    f"split request {request.request_id} of task {task.task_id} was "
                    "superseded by a later one"
                )
            index, count = last[2], last[3] if len(last) > 3 else 1
            return self._reply(request, index, count), None
        same_repetition = request.repetition == iteration.split_repetition
        index = iteration.next_split if same_repetition else 0
        total = self.count()
        if request.repetition < iteration.split_repetition or index >= total:
            reply = m.GetSplitReply(
                request_id=request.request_id,
                end_of_splits=True,
                repetition=iteration.split_repetition,
            )
            return reply, None
        count = min(request.max_splits, total - index)
        produced = ev.SplitProduced(
            iteration.iteration_id,
            request.repetition,
            index,
            task.task_id,
            request.request_id,
            count,
        )
        return self._reply(request, index, count), produced

    def _reply(self, request: m.GetSplit, index: int, count: int) -> m.GetSplitReply:
        splits = [self.at(i) for i in range(index, index + count)]
        return m.GetSplitReply(request_id=request.request_id, splits=splits)
