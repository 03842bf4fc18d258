"""What a tick does because time passed: silent peers, fences, job GC.

A worker silent for ``worker_timeout_ms`` is removed (``workers.remove``), a
client silent for ``client_timeout_ms`` released (``consumers.release``), a
reader silent for ``fence_timeout_ms`` taken as having fenced the lost
tasks it held back, and an iteration nobody read for ``job_gc_timeout_ms``
collected. Silence counts from when each peer was last heard from
(``liveness.py``), and never from before the dispatcher itself last woke
from a stall (``DispatcherState.awake_since``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from zmqdata._dispatcher import consumers, tasking, workers
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._wire.modes import ShardingPolicy

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

logger = logging.getLogger("zmqdata.dispatcher")
P = TypeVar("P")


def drop_silent(state: DispatcherState, now: float, out: list[Outgoing]) -> float:
    """Drops timed-out workers and clients; returns when the next one can time out.

    Heartbeats only move a peer's time out later and new peers are seen
    now, so no peer times out before the returned time: ticks until then
    skip the scan (a tick does not cost O(peers)). Tasks started to
    recover lost keys are added to ``out``.
    """
    records, liveness, awake = state.records, state.liveness, state.awake_since
    liveness.keep_only(
        records.workers.keys(), records.clients.keys(), records.iterations.keys()
    )
    worker_timeout = state.config.worker_timeout_ms / 1000
    client_timeout = state.config.client_timeout_ms / 1000
    silent_workers, worker_due = _silent(
        records.workers, liveness.worker_seen, worker_timeout, awake, now
    )
    for worker in silent_workers:
        logger.info("worker %s timed out", worker.worker_address)
        out += workers.remove(state, worker.worker_id)
    silent_clients, client_due = _silent(
        records.clients, liveness.client_seen, client_timeout, awake, now
    )
    for client in silent_clients:
        logger.info("client %d timed out", client.client_id)
        out += consumers.release(state, client, now)
    due = min(worker_due, client_due, *_time_out_fences(state, now, out))
    return due if due < math.inf else now + min(worker_timeout, client_timeout)


def _silent(
    peers: Mapping[int, P],
    seen_of: Callable[[int], float],
    timeout: float,
    awake: float,
    now: float,
) -> tuple[list[P], float]:
    """The peers silent for over ``timeout``, and when the next other one can be.

    Silence counts from ``awake`` at the earliest (``inf``: no other peer).
    One pass, no allocation per peer: it scans 20,000 at 10,000 + 10,000.

    >>> seen = {1: 1.0, 2: 4.0, 3: 4.5}
    >>> _silent({1: "a", 2: "b", 3: "c"}, seen.get, timeout=2.0, awake=0.0, now=5.0)
    (['a'], 6.0)
    """
    silent: list[P] = []
    earliest = math.inf
    for peer_id, peer in peers.items():
        seen = seen_of(peer_id)
        seen = max(seen, awake)
        if now - seen > timeout:
            silent.append(peer)
        elif seen < earliest:
            earliest = seen
    return silent, earliest + timeout


def _time_out_fences(
    state: DispatcherState, now: float, out: list[Outgoing]
) -> list[float]:
    """Exactly once: stops waiting for readers silent for ``fence_timeout_ms``.

    A lost task's keys wait for every reader of its iteration to fence it;
    a silent reader (a frozen process) would hold them for
    ``client_timeout_ms``. Its fence is taken as given (``ClientFenced`` at
    the iteration's task epoch); what it receives after its silence it
    holds until the dispatcher answers, dropping the lost tasks' elements
    (``_client/core.py``). Returns when the readers still waited for time out.
    """
    timeout = state.config.fence_timeout_ms / 1000
    due: list[float] = []
    for iteration in [i for i in state.records.iterations.values() if i.orphans]:
        orphans = iteration.orphans.values()
        fenced = False
        for client_id in sorted({c for o in orphans for c in o["waiting"]}):
            since = max(state.liveness.client_seen(client_id), state.awake_since)
            if now - since <= timeout:
                due.append(since + timeout)
                continue
            logger.info(
                "iteration %d: client %d silent for %.1f s, its fence of lost "
                "tasks is not waited for (fence_timeout_ms)",
                iteration.iteration_id,
                client_id,
                now - since,
            )
            epoch = iteration.task_epoch
            state.apply(ev.ClientFenced(iteration.iteration_id, client_id, epoch))
            fenced = True
        if fenced:
            out += tasking.recover(state, iteration.iteration_id)
    return due


def collect_iterations(state: DispatcherState, now: float) -> None:
    """Job GC: drops unfinished iterations nobody read for ``job_gc_timeout_ms``.

    DYNAMIC iterations stay unless ``gc_dynamic_sharding_jobs``: a fresh one
    would hand out the splits again and break exactly-once visitation. Dealt
    ones (multi-rank reads) do not: a fresh iteration deals every rank the
    same stream again, and an old one holds the shares of ranks that never
    came in the workers' buffers.
    """
    timeout = state.config.job_gc_timeout_ms / 1000
    for iteration in list(state.records.iterations.values()):
        if (
            iteration.finished
            or iteration.collected
            or iteration.clients
            or not iteration.former_clients  # never read: nothing to time out
        ):
            continue
        released = state.liveness.released_at(iteration.iteration_id)
        if now - released < timeout:
            continue
        job = state.records.jobs[iteration.job_id]
        dynamic = job.processing_mode == ShardingPolicy.DYNAMIC and not job.dealt
        if dynamic and not state.config.gc_dynamic_sharding_jobs:
            continue
        logger.info(
            "iteration %d of job %s had no consumer for %.1f s: collecting it",
            iteration.iteration_id,
            job.name or job.job_id,
            now - released,
        )
        state.apply(ev.IterationCollected(iteration.iteration_id))
