"""Workers: ``RegisterWorker``, ``WorkerHeartbeat``, and a worker's removal.

A heartbeat is first liveness (``liveness.py``) and metrics (``samples.py``:
its stats, its buffer fill for the autoscaler, the pipelines it holds, the
errors its tasks skipped), none of them an event; then the tasks it says
finished; then the reply: the task changes it lacks (``replies.py``) and any
trace window. A worker that leaves (drained), registers again at its address
as another process, or times out (``timeouts.py``) is removed with its tasks:
exactly once, their keys get a new task (``tasking.recover``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import (
    model,
    placement,
    replies,
    samples,
    tasking,
    trace_requests,
)
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._wire import messages as m
from zmqdata.errors import NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

logger = logging.getLogger("zmqdata.dispatcher")

MAX_TASKS_IGNORING = 65536
"""Tasks per job whose ``ignore_errors`` counts the status keeps."""


def register(
    state: DispatcherState, peer: bytes, msg: m.RegisterWorker, now: float
) -> list[Outgoing]:
    """Registers a worker (or finds it again); running iterations give it tasks."""
    records, config = state.records, state.config
    same, out = _replace_earlier(state, peer, msg)
    if same is not None:
        # The same worker again (a retry, or after a fault-tolerant
        # restart): it keeps its id and its tasks, splits included.
        state.liveness.heard_worker(same.worker_id, now)
        reply = replies.registered(records, config, msg.request_id, same)
        return [Outgoing(peer, reply), *out]
    worker_id = records.next_id
    taken = set()
    if config.worker_addresses:  # static sharding slots
        taken = {w.index for w in records.workers.values() if w.index is not None}
    state.apply(
        ev.WorkerRegistered(
            worker_id=worker_id,
            peer=peer,
            worker_address=msg.worker_address,
            data_address=msg.data_address,
            tags=tuple(msg.tags),
            local_process=msg.local_process,
            inproc_address=msg.inproc_address,
            now=now,
            index=placement.worker_index(
                msg.worker_address, config.worker_addresses, taken
            ),
        )
    )
    logger.info("worker %s registered (version %s)", msg.worker_address, msg.version)
    worker = records.workers[worker_id]
    for iteration in list(records.iterations.values()):
        job = records.jobs[iteration.job_id]
        if tasking.running(iteration) and placement.serves(job, worker):
            tasking.create(state, iteration.iteration_id, worker_id)
    reply = replies.registered(records, config, msg.request_id, worker)
    return [Outgoing(peer, reply), *out]


def _replace_earlier(
    state: DispatcherState, peer: bytes, msg: m.RegisterWorker
) -> tuple[model.Worker | None, list[Outgoing]]:
    """The registering worker's record if it has one; removes the others.

    A record with the worker's address but another peer or data address is
    an earlier worker there (one that restarted): it is gone (and what
    that starts to recover its tasks' keys is returned).
    """
    here = state.records.workers_at.get(msg.worker_address, set())
    out: list[Outgoing] = []
    for old in [state.records.workers[i] for i in sorted(here)]:
        if old.peer == peer and old.data_address == msg.data_address:
            return old, out
        out += remove(state, old.worker_id)
    return None, out


def heartbeat(
    state: DispatcherState, peer: bytes, msg: m.WorkerHeartbeat, now: float
) -> list[Outgoing]:
    """Liveness and metrics, then finished tasks, then the worker's task changes."""
    worker = _sender(state, peer, msg.worker_id)
    state.liveness.heard_worker(worker.worker_id, now)  # not state: no event
    kept = _take_stats(state, worker, msg, now)
    if msg.draining and worker.worker_id not in state.draining:
        logger.info("worker %s is draining", worker.worker_address)
        state.draining.add(worker.worker_id)
    out = _finish_reported(state, worker, msg.tasks)
    if msg.leaving:  # drained: its tasks' keys are handed out again now
        logger.info("worker %s left", worker.worker_address)
        out += remove(state, worker.worker_id)
        return [Outgoing(peer, m.WorkerHeartbeatReply(request_id=msg.request_id)), *out]
    return [Outgoing(peer, _changes(state, worker, msg, now, resend=not kept)), *out]


def _sender(state: DispatcherState, peer: bytes, worker_id: int) -> model.Worker:
    """The registered worker ``worker_id``, if ``peer`` is it.

    Ids restart at 1 with a dispatcher that lost its state: a worker whose
    id now names another worker must register again, not take its place.
    (Workers keep one routing id for life, so reconnects keep the peer.)
    """
    worker = state.records.workers.get(worker_id)
    if worker is None or worker.peer != peer:
        raise NotFoundError(f"worker {worker_id} is not registered; register again")
    return worker


def _take_stats(
    state: DispatcherState, worker: model.Worker, msg: m.WorkerHeartbeat, now: float
) -> bool:
    """Keeps the stats a heartbeat reports (metrics, not state); whether it could.

    It cannot when they are a delta against stats not kept: the reply then
    asks for all of them again.
    """
    worker_id = worker.worker_id
    previous = state.worker_samples.get(worker_id)
    reported = samples.stats_of(previous, msg)
    if reported is None:
        return False
    stats, values = reported
    state.worker_samples[worker_id] = samples.sample(
        previous, stats, now, msg.request_id, values
    )
    fill = samples.buffer_fill(stats)  # none: no task running, no supply
    if fill is None:
        state.fills.pop(worker_id, None)
    else:
        state.fills[worker_id] = fill
    if msg.pipelines or not msg.base:
        state.held_pipelines[worker_id] = frozenset(msg.pipelines)
    _note_ignored_errors(state, stats)
    return True


def _note_ignored_errors(state: DispatcherState, stats: dict[str, Any]) -> None:
    """Keeps what tasks' ``ignore_errors`` skipped, by job (finished tasks too).

    At most ``MAX_TASKS_IGNORING`` tasks per job: a lying worker can't grow it.
    """
    ignored = samples.ignored_errors(stats)
    for task_id, (iteration_id, count, last) in ignored.items():
        iteration = state.records.iterations.get(iteration_id)
        if iteration is None:
            continue
        job = state.ignored_errors.setdefault(iteration.job_id, {})
        known = job.get(task_id)
        if known is None and len(job) >= MAX_TASKS_IGNORING:
            continue
        if known is None or known[0] != count:  # the last to change goes last
            job.pop(task_id, None)
            job[task_id] = (count, last)


def _finish_reported(
    state: DispatcherState, worker: model.Worker, tasks: list[list[Any]]
) -> list[Outgoing]:
    """Finishes the tasks of ``worker`` its heartbeat says are finished."""
    out: list[Outgoing] = []
    for task_id, finished in tasks:
        task = state.records.tasks.get(task_id)
        if finished and task and task.worker_id == worker.worker_id:
            out += tasking.finish(state, task)
    return out


def _changes(
    state: DispatcherState,
    worker: model.Worker,
    msg: m.WorkerHeartbeat,
    now: float,
    resend: bool,
) -> m.WorkerHeartbeatReply:
    """The heartbeat's reply: task changes (all again if ``resend``), a trace."""
    held = state.held_pipelines.get(worker.worker_id, frozenset())
    changes = replies.task_changes(state.records, state.config, worker, msg, held)
    if resend:  # a delta against stats not kept: all again
        changes = dataclasses.replace(changes, resend=True)
    key, name = ("worker", worker.worker_id), f"worker {worker.data_address}"
    trace = state.traces.announce(key, name, trace_requests.ns(now))
    if trace:
        changes = dataclasses.replace(changes, trace=trace)
    return changes


def remove(state: DispatcherState, worker_id: int) -> list[Outgoing]:
    """Drops a worker and its tasks; their lost keys may need a new task.

    Its tasks' fences may time out before the next scan was due: scan again.
    """
    state.liveness_due = float("-inf")
    tasks = state.records.worker_tasks.get(worker_id, {}).values()
    iteration_ids = sorted({task.iteration_id for task in tasks})
    state.apply(ev.WorkerRemoved(worker_id))
    return [
        push
        for iteration_id in iteration_ids
        for push in tasking.recover(state, iteration_id, lost=True)
    ]
