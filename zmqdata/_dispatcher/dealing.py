"""Multi-rank reads on the dispatcher: which jobs are dealt, and their splits (pure).

A finite ``distributed_epoch`` job with ``num_consumers`` is *dealt*
(``_wire/deal.py``): workers run its pipeline one split at a time, and the
dispatcher hands the splits out by ordinal, in the seeded order, keeping
which task holds each ordinal until every consumer is past it. A lost
worker's ordinals are handed out again whole, so a split always yields the
same elements. ``split_runs.check_pipeline`` refuses, at job creation, what
would make a split's elements depend on anything but the split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zmqdata._dataset.node import Node
from zmqdata._dataset.ops import split_runs
from zmqdata._dataset.ops.split_runs import split_size, whole_batch_node
from zmqdata._dataset.plans import DEALT_SPLIT_SIZE
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model
from zmqdata._dispatcher.splits import Splits, answered_before
from zmqdata._wire import deal
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Ranges
from zmqdata._wire.modes import ShardingPolicy

SPLIT_SIZE = DEALT_SPLIT_SIZE
OWNERS_SHOWN = 1024
"""The most split owners an ``IterationState`` lists (from the lowest unreleased)."""


def is_dealt(processing_mode: int, num_consumers: int | None, cardinality: int) -> bool:
    """Whether a job is dealt: DYNAMIC, ``num_consumers``, a finite dataset.

    An endless one (a ``repeat()`` before ``distribute``) keeps coordinated
    rounds, as before.
    """
    dynamic = processing_mode == ShardingPolicy.DYNAMIC
    return dynamic and num_consumers is not None and cardinality != -1


COUNT_PRESERVING = ("map", "prefetch", "cache", "snapshot")
"""Ops that make one element of each, run on a split or on the whole source."""


def epoch_elements(root: Node, cardinality: int) -> int:
    """The elements of a dealt epoch of ``root`` if its ``cardinality`` says it (-1 if not).

    Splits run alone, so ops that count across elements count per split; the
    cardinality is the epoch's where every op on the main chain makes one
    element of each, but the batch splits are cut to (``whole_batch``).

    >>> import zmqdata as zd
    >>> ds = zd.Dataset.range(100).map(abs).batch(8)
    >>> epoch_elements(ds._node, 13), epoch_elements(ds.batch(2)._node, 7)
    (13, -1)
    """
    whole = whole_batch_node(root)
    chain = split_runs.main_chain(root)[:-1]  # the source makes the source's
    exact = all(n.op in COUNT_PRESERVING or n is whole for n in chain)
    return cardinality if exact and cardinality >= 0 else -1


class _Ranges(Splits):
    """Splits as plain index ranges of ``size`` (files too: several per split)."""

    def _length(self) -> int:
        return int(self.source.definition.cardinality(self.source, []))

    def count(self) -> int:
        return -(-self._length() // self.size)

    def at(self, index: int) -> list[int]:
        lo = index * self.size
        return [lo, min(lo + self.size, self._length())]


def splits_of(dataset: model.Dataset, bounds: tuple[int, int] = SPLIT_SIZE) -> Splits:
    """A dealt job's splits: index ranges sized so that batches fill up.

    About ``SPLITS_PER_PASS`` of them, each of ``bounds`` source elements, a
    multiple of ``whole_batch``: ``list_files`` splits then hold several files
    each, where other reads take one file per split.
    """
    source = dataset.split_source
    assert source is not None
    if dataset.snapshot is not None:  # one chunk each, whatever the read
        return _Ranges(source, dataset.snapshot.split_size)
    length = source.definition.cardinality(source, [])
    return _Ranges(source, split_size(length, bounds, dataset.whole_batch))


def state_of(
    iteration: model.Iteration, num_splits: int, elements: int = -1
) -> dict[str, Any]:
    """``IterationState.deal``: the epoch, its splits and who holds them.

    ``elements``: the epoch's, where known (``epoch_elements``; -1 otherwise).
    """
    owners = sorted(iteration.owners.items())[:OWNERS_SHOWN]
    return {
        "epoch": iteration.deal_epoch,
        "elements": elements,
        "splits": num_splits,
        "start": iteration.deal_start,
        "stream": list(iteration.deal_stream),
        "owners": [v for pair in owners for v in pair],
    }


def skip_for(
    positions: Mapping[int, Sequence[int]], num_consumers: int, ordinal: int
) -> int:
    """How many leading elements of split ``ordinal`` every consumer already has.

    ``positions``: consumer index -> ``[ordinal, index]`` of the first element
    it has not received (liveness; a consumer not heard from has nothing).

    >>> skip_for({0: [3, 5], 1: [4, 0]}, 2, 3), skip_for({0: [3, 5]}, 2, 3)
    (5, 0)
    """
    skip = None
    for consumer in range(num_consumers):
        at = positions.get(consumer)
        if at is None or at[0] < ordinal:
            return 0
        if at[0] == ordinal:
            skip = at[1] if skip is None else min(skip, at[1])
    return 0 if skip is None else skip


def answer(
    splits: Splits,
    job: model.Job,
    iteration: model.Iteration,
    task: model.Task,
    request: m.GetSplit,
    positions: Mapping[int, Sequence[int]],
) -> tuple[m.GetSplitReply, ev.SplitProduced | ev.SplitHandedAgain | None]:
    """The reply to a dealt task's ``GetSplit``, and what it hands out.

    A lost worker's ordinals go first, one per request, whole (``skip``: what
    every consumer already has); then fresh ordinals in the seeded order. A
    request sent again gets the same splits.
    """
    if task.last_split is not None and answered_before(task, request):
        last = task.last_split
        again = [] if last.skip is None else [last.skip]
        return _reply(
            splits, job, iteration, request, last.start, last.length, again
        ), None
    if iteration.lost_splits:
        ordinal = iteration.lost_splits[0]
        first = skip_for(positions, job.num_consumers or 1, ordinal)
        handed = ev.SplitHandedAgain(
            iteration.iteration_id, task.task_id, request.request_id, ordinal, first
        )
        return _reply(splits, job, iteration, request, ordinal, 1, [first]), handed
    total = splits.count()
    ordinal = max(iteration.next_split, iteration.deal_start)
    if ordinal >= total:
        reply = m.GetSplitReply(
            request_id=request.request_id,
            end_of_splits=True,
            released=iteration.released,
        )
        return reply, None
    count = min(request.max_splits, total - ordinal)
    produced = ev.SplitProduced(
        iteration.iteration_id, 0, ordinal, task.task_id, request.request_id, count
    )
    return _reply(splits, job, iteration, request, ordinal, count, []), produced


def _reply(
    splits: Splits,
    job: model.Job,
    iteration: model.Iteration,
    request: m.GetSplit,
    ordinal: int,
    count: int,
    skip: list[int],
) -> m.GetSplitReply:
    """``[0, lo, hi, ordinal, skip]`` for ``count`` ordinals from ``ordinal``."""
    order = deal.split_order(job.seed, iteration.deal_epoch, splits.count())
    stream = deal.Stream(iteration.deal_stream[0], Ranges(iteration.deal_stream[1:]))
    out = []
    for q in range(ordinal, ordinal + count):
        lo, hi = splits.at(int(order[q]))[:2]
        first = skip[0] if skip else 0
        if q == iteration.deal_start and not skip:  # a restored read's first split
            first = deal.first_skip(stream, stream.start)
        out.append([0, lo, hi, q, first])
    return m.GetSplitReply(
        request_id=request.request_id, splits=out, released=iteration.released
    )


def counted(iteration: model.Iteration, counts: Sequence[int]) -> tuple[int, ...]:
    """The ``[ordinal, count, ...]`` pairs of ``counts`` the iteration lacks."""
    new: list[int] = []
    for i in range(0, len(counts) - 1, 2):
        ordinal, count = counts[i], counts[i + 1]
        if ordinal not in iteration.split_counts and count >= 0:
            new += [ordinal, count]
    return tuple(new)


def released_below(
    iteration: model.Iteration,
    positions: Mapping[int, Sequence[int]],
    num_consumers: int,
) -> int:
    """The lowest ordinal some consumer still reads (all heard from), else 0."""
    if len(positions) < num_consumers:
        return iteration.released
    return max(iteration.released, min(at[0] for at in positions.values()))
