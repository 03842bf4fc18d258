"""Tasks: made for a worker, pushed to it, finished, and made again for lost keys.

Plain functions of the ``DispatcherState`` (like its request handlers), shared
by every handler that starts or ends work: a new iteration or consumer
process (``consumers.py``, ``jobs.py``), a registering worker
(``workers.py``), a finished or lost task. Exactly once: ``recover`` gives
the keys of lost tasks a new task when no other task would hand them out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model, placement, replies
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

logger = logging.getLogger("zmqdata.dispatcher")


def running(iteration: model.Iteration) -> bool:
    """Whether ``iteration`` still hands out work (neither finished nor collected)."""
    return not iteration.finished and not iteration.collected


def create(state: DispatcherState, iteration_id: int, worker_id: int) -> model.Task:
    """A task for ``worker_id``.

    In a running coordinated iteration it joins the schedule at the horizon,
    a round no consumer has reached.
    """
    records = state.records
    task_id = records.next_id
    state.apply(ev.TaskCreated(task_id, iteration_id, worker_id))
    iteration = records.iterations[iteration_id]
    if iteration.schedule:
        task_ids = (*iteration.schedule[-1][1], task_id)
        state.apply(ev.ScheduleChanged(iteration_id, iteration.horizon, task_ids))
    return records.tasks[task_id]


def push(state: DispatcherState, task: model.Task) -> Outgoing:
    """Tells ``task``'s worker to start it now (heartbeats are the fallback)."""
    worker = state.records.workers[task.worker_id]
    held = state.held_pipelines.get(task.worker_id, frozenset())
    task_def = replies.task_def(state.records, state.config, task, held)
    return Outgoing(worker.peer, m.ProcessTask(tasks=[task_def.to_wire()]))


def finish(state: DispatcherState, task: model.Task) -> list[Outgoing]:
    """``task`` is done; its iteration's lost keys may need a new task."""
    if task.finished:
        return []
    state.apply(ev.TaskFinished(task.task_id))
    return recover(state, task.iteration_id)


def recover(
    state: DispatcherState, iteration_id: int, lost: bool = False
) -> list[Outgoing]:
    """Exactly once: a new task for keys to hand out again, if none would.

    Needed when every task of the iteration is finished or lost: the
    least busy live worker that serves the job gets one (none: the next
    worker to register does). Multi-rank reads get one at every loss
    (``lost``): the other tasks may be stopped by full buffers of later
    splits, which no reader can place before the lost ones are made.
    """
    records = state.records
    iteration = records.iterations.get(iteration_id)
    if (
        iteration is None
        or not (iteration.pending or iteration.lost_splits)
        or not running(iteration)
    ):
        return []
    if not (lost and iteration.lost_splits) and not all(
        task.finished for task in iteration.tasks.values()
    ):
        return []
    workers = serving(state, records.jobs[iteration.job_id])
    if not workers:
        return []
    busy = records.worker_tasks
    worker = min(workers, key=lambda w: len(busy.get(w.worker_id, ())))
    logger.info(
        "iteration %d: a new task on worker %s hands out again %d lost key "
        "ranges, %d lost splits",
        iteration_id,
        worker.worker_address,
        len(iteration.pending) // 2,
        len(iteration.lost_splits),
    )
    return [push(state, create(state, iteration_id, worker.worker_id))]


def serving(state: DispatcherState, job: model.Job) -> list[model.Worker]:
    """The live workers that get tasks of ``job``, oldest first."""
    candidates = list(state.records.workers.values())
    if placement.reads_local_processes(job):  # only its consumers' processes
        candidates = workers_in(state.records, job.consumer_processes)
    return [
        worker
        for worker in candidates
        if placement.serves(job, worker) and worker.worker_id not in state.draining
    ]


def workers_in(records: ClusterRecords, processes: Iterable[str]) -> list[model.Worker]:
    """The workers in ``processes``, oldest first (an index, not a scan)."""
    index = records.workers_in
    ids = sorted({i for process in processes for i in index.get(process, ())})
    return [records.workers[i] for i in ids]
