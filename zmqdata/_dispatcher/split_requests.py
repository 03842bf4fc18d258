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

from zmqdata._dispatcher import dealing, model, replies, snapshot_saves
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.empty_passes import EmptyPasses
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.splits import (
    MAX_SPLITS_PER_REQUEST,
    Splits,
    answered_before,
    split_period_ms,
)
from zmqdata._wire import messages as m
from zmqdata.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

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
    snapshot_saves.took(state, dataset, msg)
    if job.dealt:
        reply = _deal_split(state, dataset, job, iteration, task, msg)
    else:
        reply = _empty_data(state, iteration, task, msg) or _split(
            state, job, dataset, iteration, task, msg
        )
    reply.chunks = snapshot_saves.words(state, dataset, reply.splits)
    ceiling_ms = replies.worker_heartbeat_max_ms(state.config)
    reply.period_ms = split_period_ms(len(records.workers), ceiling_ms)
    return [Outgoing(peer, reply)]


def _split(
    state: DispatcherState,
    job: model.Job,
    dataset: model.Dataset,
    iteration: model.Iteration,
    task: model.Task,
    msg: m.GetSplit,
) -> m.GetSplitReply:
    """The answer of the job's split plan (``Splits.answer``), its hand-out journaled."""
    splits = _splits_of(state, job, dataset, iteration.repetition)
    reply, handed = splits.answer(
        iteration, task, msg, state.records.tracked(iteration)
    )
    if handed is not None:
        state.apply(handed)
        state.splits_total += len(reply.splits)
    if reply.splits and isinstance(handed, ev.SplitProduced):
        passes = _watched(state, iteration.iteration_id)
        passes.took(task.task_id, handed.repetition, first=handed.index == 0)
    return reply


def _watched(state: DispatcherState, iteration_id: int) -> EmptyPasses:
    """The iteration's ``EmptyPasses``; those of iterations over are dropped first."""
    watched = state.empty_passes
    if iteration_id not in watched:
        iterations = state.records.iterations
        for over in [
            i for i in watched if i not in iterations or iterations[i].finished
        ]:
            del watched[over]
        watched[iteration_id] = EmptyPasses()
    return watched[iteration_id]


def _empty_data(
    state: DispatcherState,
    iteration: model.Iteration,
    task: model.Task,
    msg: m.GetSplit,
) -> m.GetSplitReply | None:
    """The end of an endless ``repeat`` a whole pass of which made nothing (``empty_passes.py``).

    None: answer as the plan says (as ever to a request sent again).
    """
    passes = state.empty_passes.get(iteration.iteration_id)
    if passes is None or iteration.pending or answered_before(task, msg):
        return None
    tasks = iteration.tasks

    def running(task_id: int) -> bool:
        return task_id in tasks and not tasks[task_id].finished

    if not passes.heard(task.task_id, msg.repetition, msg.empty_pass, running):
        return None
    return m.GetSplitReply(
        request_id=msg.request_id,
        end_of_splits=True,
        exhausted=True,
        repetition=iteration.split_repetition,
    )


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
