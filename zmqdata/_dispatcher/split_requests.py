"""``GetSplit``: a DYNAMIC task's worker asks for its next splits.

A job's splits come from its plan (``splits.Splits``: a function of the
dataset, the seed and the repetition, made once and kept beside the records in
``DispatcherState.split_plans``), or for a multi-rank read from its deal
(``dealing.py``). Each answer also says when to ask again
(``splits.split_period_ms``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from zmqdata._dispatcher import dealing, model, replies
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.splits import MAX_SPLITS_PER_REQUEST, Splits, split_period_ms
from zmqdata._wire import messages as m
from zmqdata.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState, Outgoing

SPLIT_PLANS_KEPT = 4096
"""Split plans (``Splits``) kept made (the oldest goes first)."""


def get_split(
    state: DispatcherState, peer: bytes, msg: m.GetSplit, now: float
) -> list[Outgoing]:
    """Hands out the next split; a retried request gets the split it got before.

    The task remembers the last split it was given (journaled with it), so
    a request sent again after a stall or a dispatcher restart never
    consumes a second split (``Splits.answer``). Exactly once: lost tasks'
    keys are handed out again first.
    """
    records = state.records
    iteration, task = _asking(records, msg)
    job = records.jobs[iteration.job_id]
    dataset = records.datasets[job.dataset_id]
    if task.worker_id in records.workers:  # its task asking: it lives
        state.liveness.heard_worker(task.worker_id, now)
    if job.dealt:
        reply = _deal_split(state, dataset, job, iteration, task, msg)
    else:
        tracked = records.tracked(iteration)
        splits = _splits_of(state, job, dataset, iteration.repetition)
        reply, handed = splits.answer(iteration, task, msg, tracked)
        if handed is not None:
            state.apply(handed)
            state.splits_total += len(reply.splits)
    ceiling_ms = replies.worker_heartbeat_max_ms(state.config)
    reply.period_ms = split_period_ms(len(records.workers), ceiling_ms)
    return [(peer, reply)]


def _asking(
    records: ClusterRecords, msg: m.GetSplit
) -> tuple[model.Iteration, model.Task]:
    """The iteration and the task that ask, if they may (a splittable source read)."""
    iteration = records.iterations.get(msg.iteration_id)
    if iteration is None:
        raise NotFoundError(f"iteration {msg.iteration_id} does not exist")
    job = records.jobs[iteration.job_id]
    source = records.datasets[job.dataset_id].split_source
    if source is None:
        raise InvalidArgumentError(
            f"iteration {msg.iteration_id} has no splittable source"
        )
    task = iteration.tasks.get(msg.task_id)
    if task is None:
        raise NotFoundError(
            f"task {msg.task_id} is not a task of iteration {msg.iteration_id}"
        )
    if not 1 <= msg.max_splits <= MAX_SPLITS_PER_REQUEST:
        raise InvalidArgumentError(
            f"get_split.max_splits must be in [1, {MAX_SPLITS_PER_REQUEST}], "
            f"got {msg.max_splits}"
        )
    return iteration, task


def _splits_of(
    state: DispatcherState, job: model.Job, dataset: model.Dataset, repetition: int
) -> Splits:
    """The split plan of ``job``'s ``repetition``, made once.

    A source's cardinality is not free. Not state: a plan is a function
    of the dataset, the seed, the repetition and whether keys number
    outputs, so the jobs alike share it; at most ``SPLIT_PLANS_KEPT`` are kept.
    """
    plans = state.split_plans
    key = (job.dataset_id, job.seed, repetition, job.split_outputs)
    splits = plans.get(key)
    if splits is None:
        if len(plans) >= SPLIT_PLANS_KEPT:
            del plans[next(iter(plans))]
        splits = plan(dataset, job.seed, repetition, job.split_outputs)
        plans[key] = splits
    return splits


def plan(
    dataset: model.Dataset, seed: int | None, repetition: int, by_outputs: bool
) -> Splits:
    """A DYNAMIC job's splits: keyed by outputs, sized as a multi-rank job's.

    Each such split costs a fresh pipeline iterator (as a dealt one does),
    and its size is a multiple of the first ``batch`` where that fills it.
    """
    source = dataset.split_source
    assert source is not None
    if not by_outputs:
        return Splits.of(source, seed, repetition)
    sized = dealing.splits_of(dataset)
    return dataclasses.replace(sized, seed=seed, epoch=repetition, outputs=True)


def _deal_split(
    state: DispatcherState,
    dataset: model.Dataset,
    job: model.Job,
    iteration: model.Iteration,
    task: model.Task,
    msg: m.GetSplit,
) -> m.GetSplitReply:
    """Multi-rank reads: takes the task's split counts, hands out its next split."""
    counts = dealing.counted(iteration, msg.counts)
    if counts:
        state.apply(ev.SplitsCounted(iteration.iteration_id, counts))
    positions = state.deal_positions.get(iteration.iteration_id, {})
    splits = dealing.splits_of(dataset)
    reply, handed = dealing.answer(splits, job, iteration, task, msg, positions)
    if handed is not None:
        state.apply(handed)
        state.splits_total += len(reply.splits)
    return reply
