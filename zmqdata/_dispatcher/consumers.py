"""Iteration clients: ``GetOrCreateIteration``, ``ClientHeartbeat``, ``ReleaseIterationClient``.

A consumer acquires a client of an iteration (its job's repetition, made and
started on first use: its tasks, and a coordinated read's schedule), then
heartbeats with what it read: its waits and rate (``readers.py``, for the
autoscaler, not state), its acknowledgements and fences (``acks.py``), a
multi-rank read's position (``dealing.py``), tasks it saw finish and the
coordinated round it reached. Each answer is its iteration state
(``replies.py``). A client that leaves or times out (``timeouts.py``) is
released: exactly once, lost tasks' keys it held back may need a new task.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from zmqdata._dispatcher import (
    acks,
    checks,
    dealing,
    model,
    readers,
    replies,
    tasking,
    trace_requests,
)
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError, NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

ROUND_MARGIN = 1024
"""Coordinated reads: rounds promised ahead of the furthest consumer."""


def get_or_create_iteration(
    state: DispatcherState, peer: bytes, msg: m.GetOrCreateIteration, now: float
) -> list[Outgoing]:
    """A new client of the job's iteration ``msg.repetition`` (made if new)."""
    records = state.records
    client = records.clients.get(records.created_by.get(msg.request_key, 0))
    if client is not None:  # a retry of a request already done
        return [Outgoing(peer, state_of(state, client, msg.request_id))]
    job = records.jobs.get(msg.job_id)
    if job is None:
        raise NotFoundError(f"job {msg.job_id} does not exist")
    out: list[Outgoing] = []
    iteration_id = job.iterations.get(msg.repetition)
    checks.check_joinable(job, records.iterations.get(iteration_id or 0))
    if msg.resume is not None:
        checks.check_resume(job, created=iteration_id is None, keys=msg.resume)
    resume = checks.deal_resume(job, msg, records.iterations.get(iteration_id or 0))
    if iteration_id is None:
        iteration_id = records.next_id
        state.apply(ev.IterationCreated(iteration_id, job.job_id, msg.repetition))
        if msg.resume:
            state.apply(ev.IterationResumed(iteration_id, tuple(msg.resume)))
        if resume is not None:
            stream = tuple(resume.stream.to_wire())
            state.apply(
                ev.DealResumed(iteration_id, resume.epoch, resume.start_ordinal, stream)
            )
        out = _start(state, records.iterations[iteration_id])
    client_id = records.next_id
    acquired = ev.ClientAcquired(
        client_id, iteration_id, now, msg.request_key, owner=state.curve_key
    )
    state.apply(acquired)
    reply = state_of(state, records.clients[client_id], msg.request_id)
    return [Outgoing(peer, reply), *out]


def _start(state: DispatcherState, iteration: model.Iteration) -> list[Outgoing]:
    """A new iteration's tasks (and coordinated schedule), pushed to workers."""
    job = state.records.jobs[iteration.job_id]
    tasks = [
        tasking.create(state, iteration.iteration_id, worker.worker_id)
        for worker in tasking.serving(state, job)
    ]
    if job.num_consumers is not None and not job.dealt:
        task_ids = tuple(t.task_id for t in tasks)
        state.apply(ev.ScheduleChanged(iteration.iteration_id, 0, task_ids))
        state.apply(ev.HorizonExtended(iteration.iteration_id, ROUND_MARGIN))
    return [tasking.push(state, task) for task in tasks]


def heartbeat(
    state: DispatcherState, peer: bytes, msg: m.ClientHeartbeat, now: float
) -> list[Outgoing]:
    """Acks first (a fence promises they are all in), then the fence.

    Then finished tasks and the coordinated horizon.
    """
    client = _client(state, msg.client_id)
    state.liveness.heard_client(client.client_id, now)  # not state: no event
    reads = state.reads.get(client.client_id)
    if reads is None:
        reads = state.reads[client.client_id] = readers.Reads()
    reads.observe(now, msg.consumed, fraction(msg.starved), msg.consumer_index)
    iteration = state.records.iterations[client.iteration_id]
    acks.ack(state, iteration, msg.acked)
    acks.outputs_acked(state, iteration, msg.progress)
    if acks.fences(iteration, client.client_id, msg.task_epoch):
        fenced = ev.ClientFenced(
            iteration.iteration_id, client.client_id, msg.task_epoch
        )
        state.apply(fenced)
    out = tasking.recover(state, iteration.iteration_id)
    _deal_progress(state, iteration, msg.deal)
    for task_id in msg.finished_tasks:
        task = iteration.tasks.get(task_id)
        if task is not None:
            out += tasking.finish(state, task)
    wanted = (msg.current_round or 0) + ROUND_MARGIN
    if iteration.schedule and wanted > iteration.horizon:
        state.apply(ev.HorizonExtended(iteration.iteration_id, wanted))
    reply = state_of(state, client, msg.request_id, msg.known)
    if msg.share_traces:
        name = f"trainer {client.client_id}"
        if msg.consumer_index is not None:
            name += f" (rank {msg.consumer_index})"
        key = ("client", client.client_id)
        trace = state.traces.announce(key, name, trace_requests.ns(now))
        reply = dataclasses.replace(reply, trace=trace)
    return [Outgoing(peer, reply), *out]


def _client(state: DispatcherState, client_id: int) -> model.Client:
    """The live client ``client_id``; an error saying why it is gone if not."""
    records = state.records
    client = records.clients.get(client_id)
    collected = records.collected_clients.get(client_id)
    if client is None and collected is not None:
        raise FailedPreconditionError(
            f"iteration {collected} of client {client_id} has been garbage "
            "collected due to inactivity (no consumer for "
            f"{state.config.job_gc_timeout_ms} ms). Consider configuring the "
            "dispatcher with a higher job_gc_timeout_ms"
        )
    if client is None:
        raise NotFoundError(
            f"iteration client {client_id} is unknown (released, timed out, or the "
            "dispatcher restarted without fault_tolerant_mode)"
        )
    return client


def _deal_progress(
    state: DispatcherState, iteration: model.Iteration, position: list[int]
) -> None:
    """Multi-rank reads: a consumer's position; releases splits all are past."""
    records = state.records
    job = records.jobs[iteration.job_id]
    if not job.dealt or len(position) != 3 or iteration.finished:
        return
    consumer, ordinal, index = position
    num_consumers = job.num_consumers or 1
    if not 0 <= consumer < num_consumers:
        return
    positions = state.deal_positions.setdefault(iteration.iteration_id, {})
    positions[consumer] = [ordinal, index]
    below = dealing.released_below(iteration, positions, num_consumers)
    if below > iteration.released:
        state.apply(ev.SplitsReleased(iteration.iteration_id, below))
    total = dealing.splits_of(records.datasets[job.dataset_id]).count()
    if ordinal >= total and consumer not in iteration.done_consumers:
        state.apply(ev.DealConsumerDone(iteration.iteration_id, consumer))
    if len(iteration.done_consumers) >= num_consumers:
        state.deal_positions.pop(iteration.iteration_id, None)


def state_of(
    state: DispatcherState, client: model.Client, request_id: int, known: int = 0
) -> m.IterationState:
    """``client``'s iteration state; ``unchanged`` if it ``known`` it.

    Multi-rank reads are always told everything (their deal moves on).
    """
    records = state.records
    iteration = records.iterations[client.iteration_id]
    job = records.jobs[iteration.job_id]
    reply = replies.iteration_state(
        records,
        state.config,
        client,
        request_id,
        state.incarnation,
        known=0 if job.dealt else known,
    )
    if not job.dealt:
        return reply
    dataset = records.datasets[job.dataset_id]
    splits = dealing.splits_of(dataset).count()
    deal = dealing.state_of(iteration, splits, dataset.epoch_elements)
    return dataclasses.replace(reply, deal=deal)


def release_client(
    state: DispatcherState, peer: bytes, msg: m.ReleaseIterationClient, now: float
) -> list[Outgoing]:
    """A consumer is done: its last acks and position, then its client goes."""
    client = state.records.clients.get(msg.client_id)
    out: list[Outgoing] = []
    if client is not None:
        iteration = state.records.iterations[client.iteration_id]
        acks.ack(state, iteration, msg.acked)
        _deal_progress(state, iteration, msg.deal)
        out = release(state, client, now)
    return [Outgoing(peer, m.Ok(request_id=msg.request_id)), *out]


def release(state: DispatcherState, client: model.Client, now: float) -> list[Outgoing]:
    """A client leaves; lost tasks' keys it held back may need a new task."""
    state.apply(ev.ClientReleased(client.client_id, now))
    state.liveness.released(client.iteration_id, now)
    return tasking.recover(state, client.iteration_id)


def fraction(value: float) -> float:
    """``value`` in [0, 1] (a hostile NaN is 0).

    >>> fraction(float("nan")), fraction(1.5), fraction(0.25)
    (0.0, 1.0, 0.25)
    """
    return min(1.0, max(0.0, value))
