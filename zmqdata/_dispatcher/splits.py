"""DYNAMIC sharding: how the dispatcher cuts a source into splits and hands them out.

A source of ``n`` elements is cut into index ranges of ``split_size(n)``
elements (files: one each); split ``i`` is computed without listing the others.
``Splits.answer`` decides what a task's ``GetSplit`` gets, from the records
alone; the dispatcher journals the ``SplitProduced`` (or, keys of a lost task
handed out again, ``RangesHanded``) event it returns. A split goes out as
``[repetition, lo, hi]``; a split of an exactly-once job keyed by its outputs
(``outputs``, ``_wire/outputs.py``) as ``[repetition, lo, hi, first, end]``:
the source range to run and the output keys to send.

>>> import zmqdata as zd
>>> splits = Splits.of(zd.Dataset.range(1_000)._node)
>>> splits.size, splits.count(), splits.at(2)
(15, 67, [30, 45])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from zmqdata._dataset.iterator import Split
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.source import SplittableSource
from zmqdata._dataset.ops.split_runs import SPLITS_PER_PASS
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model
from zmqdata._wire import lineage, outputs
from zmqdata._wire import messages as m
from zmqdata._wire.deal import split_order
from zmqdata._wire.lineage import Ranges
from zmqdata.errors import FailedPreconditionError

MAX_SPLIT_SIZE = 256
MAX_SPLITS_PER_REQUEST = 256
"""The most splits one ``GetSplit`` may ask for."""
SPLIT_REQUESTS_PER_S = 4_000
"""The split requests a second one dispatcher plans for, however many workers
ask: past this many workers, each is told to ask less often (``split_period_ms``)."""
MAX_SPLITS_SCANNED = 4_096
"""Resumed reads: the most splits one ``GetSplit`` passes over (all done ones
are skipped); a reply with no split and no ``end_of_splits`` says ask again."""


def split_period_ms(workers: int, heartbeat_max_ms: int) -> int:
    """How often each of ``workers`` may ask for splits (``GetSplitReply.period_ms``).

    ``SPLIT_REQUESTS_PER_S`` in all, at most a worker's quiet heartbeat
    interval: a worker that asks within it needs no heartbeat to be seen
    alive (docs/architecture.md, Heartbeats that cost what changes), and
    holds no more than that much work ahead of the others at an epoch's end.

    >>> split_period_ms(100, 2_500), split_period_ms(6_000, 2_500)
    (25, 1500)
    >>> split_period_ms(100_000, 2_500)
    2500
    """
    return min(heartbeat_max_ms, 1000 * workers // SPLIT_REQUESTS_PER_S)


def split_size(num_elements: int) -> int:
    """Elements per DYNAMIC split: about ``SPLITS_PER_PASS`` splits, 1..256 each."""
    return max(1, min(MAX_SPLIT_SIZE, num_elements // SPLITS_PER_PASS))


@dataclass(frozen=True)
class Splits:
    """A splittable ``source`` (a ``SplittableSource`` node) cut into splits."""

    source: Node
    size: int
    """At most this many elements per split."""
    seed: int | None = None
    """Fresh splits go out in an order drawn from ``(seed, epoch, repetition)``."""
    epoch: int = 0
    outputs: bool = False
    """Keys number each split's outputs (``_wire/outputs.py``), not source elements."""

    @classmethod
    def of(
        cls,
        source: Node,
        seed: int | None = None,
        epoch: int = 0,
        outputs: bool = False,
    ) -> Splits:
        """The splits of ``source``, sized by its cardinality."""
        size = split_size(source.definition.cardinality(source, []))
        return cls(source, size, seed, epoch, outputs)

    @property
    def _op(self) -> SplittableSource:
        return cast(SplittableSource, self.source.definition)  # see find_split_source

    def count(self) -> int:
        """How many splits one pass over the source has."""
        return int(self._op.num_splits(self.source, self.size))

    def at(self, index: int) -> Split:
        """Split ``index``: ``[lo, hi]`` (``list_files``: ``[k, k+1]``, file ``k``)."""
        return self._op.split_at(self.source, self.size, index)

    def answer(
        self,
        iteration: model.Iteration,
        task: model.Task,
        request: m.GetSplit,
        tracked: bool = False,
    ) -> tuple[m.GetSplitReply, ev.SplitProduced | ev.RangesHanded | None]:
        """The reply to ``task``'s ``request``, and what it hands out (if anything).

        A request gets up to ``request.max_splits`` consecutive splits, each
        ``[repetition, lo, hi]``. Requests of one task are numbered: one sent
        again gets the splits it got the first time (nothing new is handed
        out), an older one is refused. A later repetition starts its splits
        from 0; an earlier one is over, as is one whose splits are all handed
        out (``end_of_splits``); fresh splits go out a ``fair_share`` of
        those left at most. Exactly once (``tracked``): the iteration's
        pending keys come first, whatever the repetition asked for (about
        ``max_splits`` splits' worth); fresh splits leave out the keys of a
        resumed read's ``done`` (a split all done is skipped), and the event
        carries the keys handed.
        """
        if answered_before(task, request):
            again = self._reply(request, self._again(iteration, task))
            return _with_marks(again, iteration, task.last_keys), None
        if iteration.pending:
            per_split = outputs.PER_SPLIT if self.outputs else self.size
            keys = Ranges(iteration.pending).take(request.max_splits * per_split)
            handed = ev.RangesHanded(
                iteration.iteration_id, task.task_id, request.request_id, tuple(keys)
            )
            reply = _with_marks(
                self._reply(request, self.handed(keys)), iteration, keys
            )
            return reply, handed
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
        share = fair_share(request.max_splits, total - index, len(iteration.tasks))
        splits, count = self._scan(request, share, index, total, iteration.done)
        produced = ev.SplitProduced(
            iteration.iteration_id,
            request.repetition,
            index,
            task.task_id,
            request.request_id,
            count,
            tuple(keys_of(splits, self.outputs)) if tracked else (),
        )
        return self._reply(request, splits), produced

    def _again(self, iteration: model.Iteration, task: model.Task) -> list[list[int]]:
        """The splits ``task``'s last request got (``model.Task.last_split``)."""
        assert task.last_split is not None
        _, repetition, index, count, _ = task.last_split
        if count == 0:
            return self.handed(task.last_keys)
        done = iteration.done
        return [
            part
            for i in range(index, index + count)
            for part in self._fresh(repetition, i, done)
        ]

    def _scan(
        self, request: m.GetSplit, wanted: int, index: int, total: int, done: Ranges
    ) -> tuple[list[list[int]], int]:
        """Fresh splits from ``index`` on for ``request``, and how many were passed.

        Up to ``wanted`` splits with keys not ``done``; splits all done
        are passed over (at most ``MAX_SPLITS_SCANNED`` in one request).
        """
        splits: list[list[int]] = []
        given = scanned = 0
        while given < wanted and index + scanned < total:
            parts = self._fresh(request.repetition, index + scanned, done)
            scanned += 1
            given += bool(parts)
            splits += parts
            if scanned >= MAX_SPLITS_SCANNED:
                break
        return splits, scanned

    def _fresh(self, repetition: int, index: int, done: Ranges) -> list[list[int]]:
        """Split ``index`` of ``repetition``: ``[repetition, lo, hi]`` parts not ``done``.

        Keyed by outputs: the split once, with each range of its output keys
        not ``done`` (``[repetition, lo, hi, first, end]``).
        """
        if self.seed is not None:
            pass_number = self.epoch * 2**20 + repetition
            index = int(split_order(self.seed, pass_number, self.count())[index])
        lo, hi = self.at(index)[:2]
        if self.outputs:
            first = outputs.base(repetition, index, self.count())
            wanted = done.missing(first, first + outputs.PER_SPLIT)
            return [
                [repetition, lo, hi, wanted[i], wanted[i + 1]]
                for i in range(0, len(wanted), 2)
            ]
        base = lineage.key(repetition, 0)
        missing = done.missing(base + lo, base + hi)
        return [
            [repetition, missing[i] - base, missing[i + 1] - base]
            for i in range(0, len(missing), 2)
        ]

    def handed(self, keys: Sequence[int]) -> list[list[int]]:
        """Keys (flat ranges) handed out again, as splits of at most ``size``.

        >>> import zmqdata as zd
        >>> splits = Splits.of(zd.Dataset.range(1_000)._node)
        >>> splits.handed([5, 40, lineage.key(1, 3), lineage.key(1, 4)])
        [[0, 5, 20], [0, 20, 35], [0, 35, 40], [1, 3, 4]]
        """
        if self.outputs:
            return self._handed_outputs(keys)
        out = []
        for i in range(0, len(keys), 2):
            repetition, lo = lineage.split_key(keys[i])
            hi = lo + keys[i + 1] - keys[i]  # a range never spans two repetitions
            out += [
                [repetition, a, min(a + self.size, hi)]
                for a in range(lo, hi, self.size)
            ]
        return out

    def _handed_outputs(self, keys: Sequence[int]) -> list[list[int]]:
        """Output keys handed out again: ``[repetition, lo, hi, first, end]`` per split part.

        >>> import zmqdata as zd
        >>> splits = Splits.of(zd.Dataset.range(1_000)._node, outputs=True)
        >>> second = outputs.base(0, 1, splits.count())
        >>> handed = splits.handed([second + 4, second + outputs.PER_SPLIT + 2])
        >>> [[r, lo, hi, first - second, end - second] for r, lo, hi, first, end in handed]
        [[0, 15, 30, 4, 4294967296], [0, 30, 45, 4294967296, 4294967298]]
        """
        out = []
        count = self.count()
        for i in range(0, len(keys), 2):
            first, end = keys[i], keys[i + 1]
            while first < end:
                repetition, split, _ = outputs.locate(first, count)
                part_end = min(end, outputs.split_base(first) + outputs.PER_SPLIT)
                out.append([repetition, *self.at(split)[:2], first, part_end])
                first = part_end
        return out

    @staticmethod
    def _reply(request: m.GetSplit, splits: list[list[int]]) -> m.GetSplitReply:
        return m.GetSplitReply(request_id=request.request_id, splits=splits)


def _with_marks(
    reply: m.GetSplitReply, iteration: model.Iteration, keys: Sequence[int]
) -> m.GetSplitReply:
    """``reply``, handing ``keys`` out again, with the marks of their roots."""
    if not keys or not iteration.progress:
        return reply
    return dataclasses.replace(reply, progress=iteration.marks_in(keys))


def fair_share(asked: int, left: int, tasks: int) -> int:
    """Splits one request gets: ``asked``, at most ``1 / (2 * tasks)`` of those ``left``.

    One at least. A worker asks for many cheap splits at once (``_worker/splitbatch.py``),
    and what it took only its link can carry: near the end of a pass the
    others would sit idle while it drains them. So a task's batches shrink as
    the pass runs out, and the last hold a split or two.

    >>> fair_share(16, 1_000, 4), fair_share(16, 80, 4), fair_share(16, 3, 4)
    (16, 10, 1)
    """
    return max(1, min(asked, left // (2 * max(1, tasks))))


def answered_before(task: model.Task, request: m.GetSplit) -> bool:
    """Whether ``request`` was answered already (a retry gets the same splits).

    An older request than the last answered is refused: it was superseded.
    """
    last = task.last_split
    if last is None or request.request_id > last.request_id:
        return False
    if request.request_id < last.request_id:
        raise FailedPreconditionError(
            f"split request {request.request_id} of task {task.task_id} was "
            "superseded by a later one"
        )
    return True


def keys_of(splits: Sequence[Sequence[int]], by_outputs: bool = False) -> Ranges:
    """The keys of ``[repetition, lo, hi]`` splits (``by_outputs``: of their output keys).

    >>> keys_of([[0, 0, 5], [0, 5, 9], [1, 0, 2]]) == [0, 9, lineage.STRIDE, lineage.STRIDE + 2]
    True
    >>> keys_of([[0, 0, 5, 8, 12], [0, 5, 9, 12, 20]], by_outputs=True)
    [8, 20]
    """
    keys = Ranges()
    for split in splits:
        if by_outputs:
            keys.add(split[3], split[4])
        else:
            repetition, lo, hi = split
            keys.add(lineage.key(repetition, lo), lineage.key(repetition, hi))
    return keys
