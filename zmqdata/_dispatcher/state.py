"""The dispatcher's state machine: pure, no sockets, no clock of its own.

``handle(peer, message, now)`` applies one request and returns the messages to
send, as ``(peer, message)`` pairs; ``handle_group`` does the same for every
request waiting, with one commit for them all; ``tick(now)`` does the periodic
work (worker and client liveness, job GC). Tests drive it with a fake clock.

The tables live in ``self.records`` (``records.py``), changed only by events
passed to ``apply``, which first hands each to the injected ``EventSink`` (in
fault-tolerant mode ``journal.JournalSink``, which also decides when to
compact). Group commit: once a group's requests are applied the sink keeps
their events (one fsync) before any of their replies is returned; if it
cannot, the state rolls back to what was kept and every request of the group
is answered ``UNAVAILABLE``. Request checks are in ``checks.py``, which workers serve which jobs
in ``placement.py``, DYNAMIC splits in ``splits.py``, task definitions and
iteration states in ``replies.py``, workers' stats in ``samples.py`` and the
status in ``status.py``.

>>> from zmqdata._config import DispatcherConfig
>>> from zmqdata._wire import messages as m
>>> state = DispatcherState(DispatcherConfig(worker_timeout_ms=1_000))
>>> [(peer, reply)] = state.handle(
...     b"w", m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1"), now=0.0)
>>> peer, reply.worker_id
(b'w', 1)
>>> state.tick(now=0.5), len(state.records.workers)
([], 1)
>>> state.tick(now=1.5), len(state.records.workers)
([], 0)
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph, snapshot
from zmqdata._dataset.node import Node
from zmqdata._dispatcher import (
    autoscale,
    checks,
    dealing,
    model,
    placement,
    readers,
    replies,
    samples,
    saving,
    status,
    traces,
)
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.liveness import Liveness
from zmqdata._dispatcher.protocols import Protocols
from zmqdata._dispatcher.records import EventSink, NoJournal
from zmqdata._dispatcher.splits import MAX_SPLITS_PER_REQUEST, Splits, split_period_ms
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata._runtime.spans import Tracer
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Ranges
from zmqdata._wire.modes import ShardingPolicy
from zmqdata._wire.progress import REPORT_MARKS, covers, pack, unpack
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    ZmqDataError,
    to_code,
)

logger = logging.getLogger("zmqdata.dispatcher")

Outgoing = tuple[bytes, m.Message]
Handler = Callable[[bytes, Any, float], list[Outgoing]]

ROUND_MARGIN = 1024
"""Coordinated reads: rounds promised ahead of the furthest consumer."""
AUTOSCALE_EVERY_S = 0.5
"""How often the autoscaler observes demand and supply (``autoscale.py``)."""
AUTOSCALE_PEERS_PER_S = 10_000
"""Workers and consumers the autoscaler's signals may scan a second: past
5,000 it observes less often than ``AUTOSCALE_EVERY_S`` (every 2 s at 20,000:
five observations in its default 10 s window)."""
MAX_TASKS_IGNORING = 65536
"""Tasks per job whose ``ignore_errors`` counts the status keeps."""
STALLED_S = 1.0
"""A loop tick this late (or half the shortest peer timeout, when less) means
the dispatcher itself stalled: ``stall_s``."""
MAX_MARKS = 65_536
"""The most roots an iteration keeps marks of (``model.Iteration.progress``)."""
SPLIT_PLANS_KEPT = 4096
"""Split plans (``Splits``) kept made (the oldest goes first)."""

__all__ = ["ROUND_MARGIN", "DispatcherState", "Outgoing"]


def stall_s(config: DispatcherConfig) -> float:
    """How late a loop tick must be to be a stall of the dispatcher's own.

    SIGSTOP, a long request, a slow disk, a collector pause of its process:
    ``STALLED_S``, or half the shortest peer timeout when less.

    >>> stall_s(DispatcherConfig(worker_timeout_ms=500))
    0.25
    """
    shortest_ms = min(config.worker_timeout_ms, config.client_timeout_ms)
    return min(STALLED_S, shortest_ms / 2000)


class DispatcherState:
    """All cluster state; requests change it only through events (``apply``)."""

    def __init__(
        self,
        config: DispatcherConfig,
        sink: EventSink | None = None,
        now: float = 0.0,
        incarnation: str = "",
    ) -> None:
        """Builds the state from what ``sink`` restores (a replayed journal).

        ``incarnation`` names this dispatcher's state: it changes when a
        dispatcher restarts without a journal, which consumers notice.
        """
        self.config = config
        self.incarnation = incarnation
        self._sink: EventSink = NoJournal() if sink is None else sink
        self.records = self._sink.restore(now)
        self.started = now  # the uptime in the status counts from here
        self._gc_due: float | None = None  # next job GC check (scheduling, not state)
        self._liveness_due = float("-inf")  # next scan for silent peers (the same)
        self._awake_since = now  # silence counts from here at the earliest
        self._failed_groups = RateLimitedLog(logger)  # a full disk: one per group
        self.liveness = Liveness(now)
        """When each peer was last heard from (beside the records: ``liveness.py``)."""
        self._key = ""
        """The CurveZMQ public key of the request being handled ("": plain)."""
        # Metrics, not state: like heartbeat times, none of these is an event.
        self.worker_samples: dict[int, samples.WorkerSample] = {}
        self.held_pipelines: dict[int, frozenset[str]] = {}
        """The pipelines each worker said it holds (``_worker/pipelines.py``)."""
        self._split_plans: dict[tuple[str, int | None, int], Splits] = {}
        """Split plans by dataset, seed and repetition, made once (``_splits_of``)."""
        self.requests_total = 0
        self.errors_total = 0
        self.splits_total = 0
        self.protocols = Protocols()
        """The protocol version each peer speaks (the server fills it in)."""
        # Autoscaling (``autoscale.py``): liveness data too, resent by every heartbeat.
        self.autoscaler = autoscale.Autoscaler()
        self.draining: set[int] = set()
        """Workers leaving: they get no new task and do not count as supply."""
        self._fills: dict[int, float] = {}
        """Each worker's last ``buffer_fill`` (supply), kept as it arrives: the
        autoscaler's signals sum them, never walking every worker's stats."""
        self.reads: dict[int, readers.Reads] = {}
        """Each consumer's reported waits and reads over the last minute (demand)."""
        self.ignored_errors: dict[int, dict[int, tuple[int, str]]] = {}
        """Job id -> task id -> errors its ``ignore_errors`` skipped, and the last
        (the task whose count changed last is last)."""
        self.save_runs = saving.SaveRuns()
        """Which worker writes which split of each running save (liveness)."""
        self.deal_positions: dict[int, dict[int, list[int]]] = {}
        """Multi-rank reads, liveness: iteration id -> consumer index -> the
        ``[ordinal, index]`` of the first element it has not received."""
        self._autoscale_due = float("-inf")
        self.traces = traces.Traces()
        """The trace window and the spans peers sent for it (not state)."""
        self.tracer = Tracer()
        """The dispatcher's own spans: each request handled, while a window is open."""
        self._handlers: dict[type[m.Message], Handler] = {
            m.RegisterWorker: self._register_worker,
            m.WorkerHeartbeat: self._worker_heartbeat,
            m.GetSplit: self._get_split,
            m.GetOrRegisterDataset: self._get_or_register_dataset,
            m.GetDatasetInfo: self._get_dataset_info,
            m.GetOrCreateJob: self._get_or_create_job,
            m.GetOrCreateIteration: self._get_or_create_iteration,
            m.ClientHeartbeat: self._client_heartbeat,
            m.ReleaseIterationClient: self._release_client,
            m.GetStatus: self._get_status,
            m.StartTrace: self._start_trace,
            m.GetTrace: self._get_trace,
            m.TraceSpans: self._trace_spans,
            m.StartSave: self._start_save,
            m.GetSaveSplit: self._get_save_split,
        }

    def apply(self, event: ev.Event) -> None:
        """Hands the event to the sink (kept at the group's commit), then applies it."""
        self._sink.append(event)
        if isinstance(event, ev.WorkerRemoved | ev.ClientReleased):
            self._leaving(event)
        elif isinstance(event, ev.WorkerRegistered):
            self.liveness.heard_worker(event.worker_id, event.now)
        elif isinstance(event, ev.ClientAcquired):
            self.liveness.heard_client(event.client_id, event.now)
        self.records.apply(event)

    def _leaving(self, event: ev.WorkerRemoved | ev.ClientReleased) -> None:
        """A leaving worker's stats go, a leaving client's reads.

        Their liveness entries stay until the next scan: a failed group puts
        them back in the records, heard when they were.
        """
        if isinstance(event, ev.WorkerRemoved):
            self.worker_samples.pop(event.worker_id, None)
            self._fills.pop(event.worker_id, None)
            self.held_pipelines.pop(event.worker_id, None)
            self.save_runs.worker_lost(event.worker_id)
            self.draining.discard(event.worker_id)
        else:
            self.reads.pop(event.client_id, None)

    def status(self, now: float | None = None) -> dict[str, Any]:
        """What ``service.get_status`` and ``zmqdata status`` show (ages at ``now``)."""
        for job_id in self.ignored_errors.keys() - self.records.jobs.keys():
            del self.ignored_errors[job_id]  # collected jobs
        shown = status.render(
            self.records,
            self.worker_samples,
            self.ignored_errors,
            now=now,
            started=self.started,
            worker_timeout_s=self.config.worker_timeout_ms / 1000,
            protocols=self.protocols.of_workers(self.records),
            reads=self.reads,
            policy=self.autoscaler.policy,
            seen=self.liveness.worker_seen,
        )
        return {
            **shown,
            "autoscale": self.autoscaler.advice.as_dict(),
            "protocol": self.protocols.status(self.records),
            "max_pipeline_bytes": self.config.max_pipeline_bytes,
        }

    # ------------------------------------------------------------ entry points

    def handle(self, peer: bytes, message: m.Message, now: float) -> list[Outgoing]:
        """Applies one request from ``peer``; returns what to send to whom.

        Its events are kept (fault-tolerant mode: fsync'ed) before it returns.
        """
        [outgoing] = self.handle_group([(peer, message)], now)
        return outgoing

    def handle_group(
        self,
        requests: Sequence[tuple[bytes, m.Message]],
        now: float,
        keys: Sequence[str] = (),
    ) -> list[list[Outgoing]]:
        """Group commit: applies every request, then keeps their events at once.

        Only then does it return what to send for each ``(peer, request)``.
        ``keys``: under CurveZMQ, each request's public key (the owner of an
        iteration client it acquires); none for a plain cluster.

        If the events cannot be kept (a full disk), the state rolls back to
        before the group and every request of it is answered ``UNAVAILABLE``:
        no reply ever depends on an event that was not kept.
        """
        errors, splits = self.errors_total, self.splits_total
        keys = keys or [""] * len(requests)
        outgoing = [
            self._handle(peer, message, now, key)
            for (peer, message), key in zip(requests, keys, strict=True)
        ]
        try:
            self._sink.applied(self.records)
        except UnavailableError as error:
            self._roll_back(now)
            self.errors_total = errors + len(requests)
            self.splits_total = splits
            self._failed_groups.warning(
                "%d requests failed: %s", len(requests), error.message
            )
            code, text = to_code(error)
            return [
                [
                    (
                        peer,
                        m.Error(request_id=message.request_id, code=code, message=text),
                    )
                ]
                for peer, message in requests
            ]
        return outgoing

    def _roll_back(self, now: float) -> None:
        """Back to the records the sink kept, after it failed to keep a group.

        Peers' liveness is beside the records: unchanged. Job GC's clock is in
        them (``last_client_released``): each iteration keeps the one it had.
        """
        before = self.records
        self.records = self._sink.restore(now)
        self._liveness_due = float("-inf")  # scan again: peers may be back
        for iteration in self.records.iterations.values():
            was = before.iterations.get(iteration.iteration_id)
            if was is not None and was.last_client_released is not None:
                iteration.last_client_released = was.last_client_released

    def _handle(
        self, peer: bytes, message: m.Message, now: float, key: str
    ) -> list[Outgoing]:
        """One request of a group, from CurveZMQ ``key``: what to send once kept."""
        handler = self._handlers.get(type(message))
        self._key = key
        self.requests_total += 1
        try:
            if handler is None:
                raise InvalidArgumentError(
                    f"{message.TYPE!r} is not a dispatcher request"
                )
            checks.check_request(message, self.config)
            log = self.tracer.log
            if log is None:
                return handler(peer, message, now)
            start = time.perf_counter_ns()
            try:
                return handler(peer, message, now)
            finally:
                log.add(message.TYPE, "dispatcher", start, time.perf_counter_ns())
        except Exception as error:  # a bug or hostile input: answer, never crash
            if not isinstance(error, ZmqDataError):
                logger.exception("dispatcher failed on %s", message.TYPE)
            code, text = to_code(error)
            reply = m.Error(request_id=message.request_id, code=code, message=text)
            self.errors_total += 1
            return [(peer, reply)]

    def tick(self, now: float) -> list[Outgoing]:
        """Periodic work: drops silent workers and clients; job GC.

        A journal that cannot be written (a full disk) leaves the state as it
        was; the same work is tried again at the next tick.
        """
        try:
            outgoing = self._tick(now)
            self._sink.applied(self.records)
        except UnavailableError as error:
            self._roll_back(now)
            self.errors_total += 1
            logger.error("dispatcher tick postponed: %s", error)
            return []
        return outgoing

    def _tick(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        if now >= self._liveness_due:
            self._liveness_due = self._drop_silent(now, out)
        if self._gc_due is None or now >= self._gc_due:
            self._gc_due = now + self.config.job_gc_check_interval_ms / 1000
            self._collect_iterations(now)
        if now >= self._autoscale_due:
            peers = len(self.records.workers) + len(self.records.clients)
            every = max(AUTOSCALE_EVERY_S, peers / AUTOSCALE_PEERS_PER_S)
            self._autoscale_due = now + every
            self.autoscaler.observe(self._signals(now))
        self._close_trace(now)
        return out

    def resumed(self, now: float) -> None:
        """The dispatcher itself stood still until ``now`` (``stall_s``).

        Every peer's silence and every fence timeout counts again from now:
        heartbeats that waited in its queue, or were never sent while their
        process stood still with it (one process: a collector pause), are
        not silence.
        """
        self._awake_since = now

    def _signals(self, now: float) -> autoscale.Signals:
        """Demand and supply now: what the autoscaler observes."""
        fills, draining = self._fills, self.draining
        total, count = sum(fills.values()), len(fills)
        for worker_id in draining & fills.keys():  # (few)
            total, count = total - fills[worker_id], count - 1
        # (a consumer not heard yet waited 0: as none may have, the max is >= 0)
        starved = max((r.last_starved for r in self.reads.values()), default=0.0)
        return autoscale.Signals(
            now,
            len(self.records.workers) - len(draining),
            starved if self.records.clients else None,
            _fraction(total / count) if count else None,
        )

    def _drop_silent(self, now: float, out: list[Outgoing]) -> float:
        """Drops timed-out workers and clients; returns when the next one can time out.

        Heartbeats only move a peer's time out later and new peers are seen
        now, so no peer times out before the returned time: ticks until then
        skip the scan (a tick does not cost O(peers)). Tasks started to
        recover lost keys are added to ``out``.
        """
        records, liveness, awake = self.records, self.liveness, self._awake_since
        liveness.keep_only(records.workers.keys(), records.clients.keys())
        worker_timeout = self.config.worker_timeout_ms / 1000
        due: list[float] = []
        for worker in list(records.workers.values()):
            seen = max(liveness.worker_seen(worker.worker_id), awake)
            if now - seen <= worker_timeout:
                due.append(seen + worker_timeout)
                continue
            logger.info("worker %s timed out", worker.worker_address)
            out += self._remove_worker(worker.worker_id)
        client_timeout = self.config.client_timeout_ms / 1000
        for client in list(records.clients.values()):
            seen = max(liveness.client_seen(client.client_id), awake)
            if now - seen <= client_timeout:
                due.append(seen + client_timeout)
                continue
            logger.info("client %d timed out", client.client_id)
            out += self._release(client, now)
        due += self._time_out_fences(now, out)
        return min(due, default=now + min(worker_timeout, client_timeout))

    def _time_out_fences(self, now: float, out: list[Outgoing]) -> list[float]:
        """Exactly once: stops waiting for readers silent for ``fence_timeout_ms``.

        A lost task's keys wait for every reader of its iteration to fence it;
        a silent reader (a frozen process) would hold them for
        ``client_timeout_ms``. Its fence is taken as given (``ClientFenced`` at
        the iteration's task epoch); what it receives after its silence it
        holds until the dispatcher answers, dropping the lost tasks' elements
        (``_client/core.py``). Returns when the readers still waited for time out.
        """
        timeout = self.config.fence_timeout_ms / 1000
        due: list[float] = []
        for iteration in [i for i in self.records.iterations.values() if i.orphans]:
            orphans = iteration.orphans.values()
            fenced = False
            for client_id in sorted({c for o in orphans for c in o["waiting"]}):
                since = max(self.liveness.client_seen(client_id), self._awake_since)
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
                self.apply(ev.ClientFenced(iteration.iteration_id, client_id, epoch))
                fenced = True
            if fenced:
                out += self._recover(iteration.iteration_id)
        return due

    def _remove_worker(self, worker_id: int) -> list[Outgoing]:
        """Drops a worker and its tasks; their lost keys may need a new task.

        Its tasks' fences may time out before the next scan was due: scan again.
        """
        self._liveness_due = float("-inf")
        tasks = self.records.worker_tasks.get(worker_id, {}).values()
        iteration_ids = sorted({task.iteration_id for task in tasks})
        self.apply(ev.WorkerRemoved(worker_id))
        return [push for i in iteration_ids for push in self._recover(i, lost=True)]

    def _collect_iterations(self, now: float) -> None:
        """Job GC: drops unfinished iterations nobody read for ``job_gc_timeout_ms``.

        DYNAMIC iterations stay unless ``gc_dynamic_sharding_jobs``: a fresh one
        would hand out the splits again and break exactly-once visitation.
        """
        timeout = self.config.job_gc_timeout_ms / 1000
        for iteration in list(self.records.iterations.values()):
            released = iteration.last_client_released
            if (
                iteration.finished
                or iteration.collected
                or iteration.clients
                or released is None
                or now - released < timeout
            ):
                continue
            job = self.records.jobs[iteration.job_id]
            dynamic = job.processing_mode == ShardingPolicy.DYNAMIC
            if dynamic and not self.config.gc_dynamic_sharding_jobs:
                continue
            logger.info(
                "iteration %d of job %s had no consumer for %.1f s: collecting it",
                iteration.iteration_id,
                job.name or job.job_id,
                now - released,
            )
            self.apply(ev.IterationCollected(iteration.iteration_id))

    # ------------------------------------------------------------ workers

    def _register_worker(
        self, peer: bytes, msg: m.RegisterWorker, now: float
    ) -> list[Outgoing]:
        same, out = self._replace_earlier(peer, msg)
        if same is not None:
            # The same worker again (a retry, or after a fault-tolerant
            # restart): it keeps its id and its tasks, splits included.
            self.liveness.heard_worker(same.worker_id, now)
            return [(peer, self._registered(msg.request_id, same)), *out]
        workers = self.records.workers
        worker_id = self.records.next_id
        taken = set()
        if self.config.worker_addresses:  # static sharding slots
            taken = {w.index for w in workers.values() if w.index is not None}
        self.apply(
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
                    msg.worker_address, self.config.worker_addresses, taken
                ),
            )
        )
        logger.info(
            "worker %s registered (version %s)", msg.worker_address, msg.version
        )
        worker = workers[worker_id]
        for iteration in list(self.records.iterations.values()):
            if self._running(iteration) and self._serves(iteration, worker):
                self._create_task(iteration.iteration_id, worker_id)
        return [(peer, self._registered(msg.request_id, worker)), *out]

    def _replace_earlier(
        self, peer: bytes, msg: m.RegisterWorker
    ) -> tuple[model.Worker | None, list[Outgoing]]:
        """The registering worker's record if it has one; removes the others.

        A record with the worker's address but another peer or data address is
        an earlier worker there (one that restarted): it is gone (and what
        that starts to recover its tasks' keys is returned).
        """
        here = self.records.workers_at.get(msg.worker_address, set())
        out: list[Outgoing] = []
        for old in [self.records.workers[i] for i in sorted(here)]:
            if old.peer == peer and old.data_address == msg.data_address:
                return old, out
            out += self._remove_worker(old.worker_id)
        return None, out

    def _note_ignored_errors(self, stats: dict[str, Any]) -> None:
        """Keeps what tasks' ``ignore_errors`` skipped, by job (finished tasks too).

        At most ``MAX_TASKS_IGNORING`` tasks per job: a lying worker can't grow it.
        """
        for task_id, (iteration_id, count, last) in samples.ignored_errors(
            stats
        ).items():
            iteration = self.records.iterations.get(iteration_id)
            if iteration is None:
                continue
            job = self.ignored_errors.setdefault(iteration.job_id, {})
            known = job.get(task_id)
            if known is None and len(job) >= MAX_TASKS_IGNORING:
                continue
            if known is None or known[0] != count:  # the last to change goes last
                job.pop(task_id, None)
                job[task_id] = (count, last)

    def _worker_heartbeat(
        self, peer: bytes, msg: m.WorkerHeartbeat, now: float
    ) -> list[Outgoing]:
        worker = self.records.workers.get(msg.worker_id)
        # Ids restart at 1 with a dispatcher that lost its state: a worker whose
        # id now names another worker must register again, not take its place.
        # (Workers keep one routing id for life, so reconnects keep the peer.)
        if worker is None or worker.peer != peer:
            raise NotFoundError(
                f"worker {msg.worker_id} is not registered; register again"
            )
        self.liveness.heard_worker(worker.worker_id, now)  # not state: no event
        previous = self.worker_samples.get(worker.worker_id)  # metrics, not state
        reported = samples.stats_of(previous, msg)
        if reported is not None:
            stats, values = reported
            self.worker_samples[worker.worker_id] = samples.sample(
                previous, stats, now, msg.request_id, values
            )
            fill = samples.buffer_fill(stats)  # none: no task running, no supply
            if fill is None:
                self._fills.pop(worker.worker_id, None)
            else:
                self._fills[worker.worker_id] = fill
            if msg.pipelines or not msg.base:
                self.held_pipelines[worker.worker_id] = frozenset(msg.pipelines)
            self._note_ignored_errors(stats)
        if msg.draining and worker.worker_id not in self.draining:
            logger.info("worker %s is draining", worker.worker_address)
            self.draining.add(worker.worker_id)
        out: list[Outgoing] = []
        for task_id, finished in msg.tasks:
            task = self.records.tasks.get(task_id)
            if finished and task and task.worker_id == worker.worker_id:
                out += self._finish(task)
        if msg.leaving:  # drained: its tasks' keys are handed out again now
            logger.info("worker %s left", worker.worker_address)
            out += self._remove_worker(worker.worker_id)
            return [(peer, m.WorkerHeartbeatReply(request_id=msg.request_id)), *out]
        held = self.held_pipelines.get(worker.worker_id, frozenset())
        changes = replies.task_changes(self.records, self.config, worker, msg, held)
        if reported is None:  # a delta against stats not kept: all again
            changes = dataclasses.replace(changes, resend=True)
        key, name = ("worker", worker.worker_id), f"worker {worker.data_address}"
        trace = self.traces.announce(key, name, _ns(now))
        if trace:
            changes = dataclasses.replace(changes, trace=trace)
        return [(peer, changes), *out]

    def _get_split(self, peer: bytes, msg: m.GetSplit, now: float) -> list[Outgoing]:
        """Hands out the next split; a retried request gets the split it got before.

        The task remembers the last split it was given (journaled with it), so
        a request sent again after a stall or a dispatcher restart never
        consumes a second split (``Splits.answer``). Exactly once: lost tasks'
        keys are handed out again first.
        """
        iteration = self._iteration(msg.iteration_id)
        job = self.records.jobs[iteration.job_id]
        source = self.records.datasets[job.dataset_id].split_source
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
        if task.worker_id in self.records.workers:  # its task asking: it lives
            self.liveness.heard_worker(task.worker_id, now)
        dataset = self.records.datasets[job.dataset_id]
        if job.dealt:
            reply = self._deal_split(dataset, job, iteration, task, msg)
        else:
            tracked = self.records.tracked(iteration)
            splits = self._splits_of(job, source, iteration.repetition)
            reply, handed = splits.answer(iteration, task, msg, tracked)
            if handed is not None:
                self.apply(handed)
                self.splits_total += len(reply.splits)
        ceiling_ms = replies.worker_heartbeat_max_ms(self.config)
        reply.period_ms = split_period_ms(len(self.records.workers), ceiling_ms)
        return [(peer, reply)]

    def _splits_of(self, job: model.Job, source: Node, repetition: int) -> Splits:
        """The split plan of ``job``'s ``repetition``, made once.

        A source's cardinality is not free. Not state: a plan is a function
        of the dataset, the seed and the repetition, so the jobs of one
        dataset and seed share it; at most ``SPLIT_PLANS_KEPT`` are kept.
        """
        plans, key = self._split_plans, (job.dataset_id, job.seed, repetition)
        splits = plans.get(key)
        if splits is None:
            if len(plans) >= SPLIT_PLANS_KEPT:
                del plans[next(iter(plans))]
            splits = Splits.of(source, job.seed, repetition)
            plans[key] = splits
        return splits

    def _deal_split(
        self,
        dataset: model.Dataset,
        job: model.Job,
        iteration: model.Iteration,
        task: model.Task,
        msg: m.GetSplit,
    ) -> m.GetSplitReply:
        """Multi-rank reads: takes the task's split counts, hands out its next split."""
        counts = dealing.counted(iteration, msg.counts)
        if counts:
            self.apply(ev.SplitsCounted(iteration.iteration_id, counts))
        positions = self.deal_positions.get(iteration.iteration_id, {})
        splits = dealing.splits_of(dataset)
        reply, handed = dealing.answer(splits, job, iteration, task, msg, positions)
        if handed is not None:
            self.apply(handed)
            self.splits_total += len(reply.splits)
        return reply

    # ------------------------------------------------------------ datasets and jobs

    def _get_or_register_dataset(
        self, peer: bytes, msg: m.GetOrRegisterDataset, now: float
    ) -> list[Outgoing]:
        records = self.records
        fingerprint = graph.fingerprint(msg.pipeline)
        key = model.registration_key(fingerprint, msg.compression)
        dataset_id = msg.dataset_id or records.datasets_by_fingerprint.get(key, "")
        existing = records.datasets.get(dataset_id)
        if existing is not None and existing.fingerprint != fingerprint:
            raise InvalidArgumentError(
                f"dataset id {dataset_id!r} is already registered with a different "
                "pipeline; datasets with the same id must be the same pipeline"
            )
        if existing is not None and existing.compression != msg.compression:
            raise InvalidArgumentError(
                f"dataset id {dataset_id!r} is already registered with compression="
                f"{existing.compression!r}, not {msg.compression!r}"
            )
        if existing is None:
            graph.deserialize(msg.pipeline, load_functions=False)  # reject garbage
            dataset_id = dataset_id or self._unused_dataset_id()
            self.apply(
                ev.DatasetRegistered(
                    dataset_id,
                    msg.pipeline,
                    fingerprint,
                    msg.compression,
                    msg.element_spec,
                )
            )
            logger.info(
                "dataset %s registered (%d bytes)", dataset_id, len(msg.pipeline)
            )
        reply = m.GetOrRegisterDatasetReply(
            request_id=msg.request_id, dataset_id=dataset_id
        )
        return [(peer, reply)]

    def _unused_dataset_id(self) -> str:
        """A fresh generated id, never one a client requested earlier."""
        candidate = self.records.next_id
        while str(candidate) in self.records.datasets:
            candidate += 1
        return str(candidate)

    def _dataset(self, dataset_id: str) -> model.Dataset:
        dataset = self.records.datasets.get(dataset_id)
        if dataset is None:
            raise NotFoundError(f"dataset id {dataset_id!r} is not registered")
        return dataset

    def _get_dataset_info(
        self, peer: bytes, msg: m.GetDatasetInfo, now: float
    ) -> list[Outgoing]:
        dataset = self._dataset(msg.dataset_id)
        reply = m.GetDatasetInfoReply(
            request_id=msg.request_id,
            element_spec=dataset.element_spec,
            compression=dataset.compression,
            cardinality=dataset.cardinality,
        )
        return [(peer, reply)]

    def _get_or_create_job(
        self, peer: bytes, msg: m.GetOrCreateJob, now: float
    ) -> list[Outgoing]:
        created_before = self.records.created_by.get(msg.request_key)
        if created_before in self.records.jobs:  # a retry of a request already done
            reply = m.GetOrCreateJobReply(
                request_id=msg.request_id, job_id=created_before
            )
            return [(peer, reply)]
        dataset = self._dataset(msg.dataset_id)
        checks.check_job(msg, dataset, self.config)
        job_id = self._create_or_find_job(msg, dataset)
        reply = m.GetOrCreateJobReply(request_id=msg.request_id, job_id=job_id)
        job = self.records.jobs[job_id]
        return [(peer, reply), *self._join(job, msg.local_process)]

    def _create_or_find_job(self, msg: m.GetOrCreateJob, dataset: model.Dataset) -> int:
        """The job ``msg`` names (a named job with its parameters), else a new one."""
        dynamic = msg.processing_mode == ShardingPolicy.DYNAMIC
        # A cross-trainer cache serves each element to every trainer and drops
        # it when its window slides: there is no "once" to track (tf.data's).
        tracked = msg.exactly_once and dynamic and not msg.cross_trainer_cache
        created = ev.JobCreated(
            self.records.next_id,
            msg.dataset_id,
            msg.job_name,
            msg.processing_mode,
            msg.num_consumers,
            msg.target_workers.upper(),
            msg.cross_trainer_cache,
            msg.request_key,
            msg.local_process,
            exactly_once=tracked,
            seed=msg.seed,
            dealt=dealing.is_dealt(
                msg.processing_mode, msg.num_consumers, dataset.cardinality
            ),
        )
        named = (msg.dataset_id, msg.job_name) if msg.job_name else None
        existing_id = None if named is None else self.records.named_jobs.get(named)
        if existing_id is None:
            self.apply(created)
            return created.job_id
        checks.check_same_job(self.records.jobs[existing_id], created)
        return existing_id

    def _join(self, job: model.Job, local_process: str) -> list[Outgoing]:
        """A LOCAL job read from one more process: its workers there get tasks."""
        if (
            not placement.reads_local_processes(job)
            or not local_process
            or local_process in job.consumer_processes
        ):
            return []
        self.apply(ev.ConsumerProcessJoined(job.job_id, local_process))
        return [
            self._push(self._create_task(iteration_id, worker.worker_id))
            for iteration_id in job.iterations.values()
            if self._running(self.records.iterations[iteration_id])
            for worker in self._workers_in((local_process,))
        ]

    def _serving(self, job: model.Job) -> list[model.Worker]:
        """The live workers that get tasks of ``job``, oldest first."""
        candidates = list(self.records.workers.values())
        if placement.reads_local_processes(job):  # only its consumers' processes
            candidates = self._workers_in(job.consumer_processes)
        return [
            worker
            for worker in candidates
            if placement.serves(job, worker) and worker.worker_id not in self.draining
        ]

    def _workers_in(self, processes: Iterable[str]) -> list[model.Worker]:
        """The workers in ``processes``, oldest first (an index, not a scan)."""
        index = self.records.workers_in
        ids = sorted({i for process in processes for i in index.get(process, ())})
        return [self.records.workers[i] for i in ids]

    # ------------------------------------------------------------ iterations and clients

    def _get_or_create_iteration(
        self, peer: bytes, msg: m.GetOrCreateIteration, now: float
    ) -> list[Outgoing]:
        records = self.records
        client = records.clients.get(records.created_by.get(msg.request_key, 0))
        if client is not None:  # a retry of a request already done
            return [(peer, self._state_of(client, msg.request_id))]
        job = records.jobs.get(msg.job_id)
        if job is None:
            raise NotFoundError(f"job {msg.job_id} does not exist")
        out: list[Outgoing] = []
        iteration_id = job.iterations.get(msg.repetition)
        if msg.resume is not None:
            checks.check_resume(job, created=iteration_id is None)
        resume = checks.deal_resume(job, msg, records.iterations.get(iteration_id or 0))
        if iteration_id is None:
            iteration_id = records.next_id
            self.apply(ev.IterationCreated(iteration_id, job.job_id, msg.repetition))
            if msg.resume:
                self.apply(ev.IterationResumed(iteration_id, tuple(msg.resume)))
            if resume is not None:
                stream = tuple(resume.stream.to_wire())
                self.apply(
                    ev.DealResumed(
                        iteration_id, resume.epoch, resume.start_ordinal, stream
                    )
                )
            out = self._start(records.iterations[iteration_id])
        client_id = records.next_id
        acquired = ev.ClientAcquired(
            client_id, iteration_id, now, msg.request_key, owner=self._key
        )
        self.apply(acquired)
        state = self._state_of(records.clients[client_id], msg.request_id)
        return [(peer, state), *out]

    def _start(self, iteration: model.Iteration) -> list[Outgoing]:
        """A new iteration's tasks (and coordinated schedule), pushed to workers."""
        job = self.records.jobs[iteration.job_id]
        tasks = [
            self._create_task(iteration.iteration_id, worker.worker_id)
            for worker in self._serving(job)
        ]
        if job.num_consumers is not None and not job.dealt:
            task_ids = tuple(t.task_id for t in tasks)
            self.apply(ev.ScheduleChanged(iteration.iteration_id, 0, task_ids))
            self.apply(ev.HorizonExtended(iteration.iteration_id, ROUND_MARGIN))
        return [self._push(task) for task in tasks]

    def _client(self, client_id: int) -> model.Client:
        client = self.records.clients.get(client_id)
        collected = self.records.collected_clients.get(client_id)
        if client is None and collected is not None:
            raise FailedPreconditionError(
                f"iteration {collected} of client {client_id} has been garbage "
                "collected due to inactivity (no consumer for "
                f"{self.config.job_gc_timeout_ms} ms). Consider configuring the "
                "dispatcher with a higher job_gc_timeout_ms"
            )
        if client is None:
            raise NotFoundError(
                f"iteration client {client_id} is unknown (released, timed out, or the "
                "dispatcher restarted without fault_tolerant_mode)"
            )
        return client

    def _client_heartbeat(
        self, peer: bytes, msg: m.ClientHeartbeat, now: float
    ) -> list[Outgoing]:
        """Acks first (a fence promises they are all in), then the fence.

        Then finished tasks and the coordinated horizon.
        """
        client = self._client(msg.client_id)
        self.liveness.heard_client(client.client_id, now)  # not state: no event
        reads = self.reads.get(client.client_id)
        if reads is None:
            reads = self.reads[client.client_id] = readers.Reads()
        reads.observe(now, msg.consumed, _fraction(msg.starved), msg.consumer_index)
        iteration = self.records.iterations[client.iteration_id]
        self._ack(iteration, msg.acked)
        self._outputs_acked(iteration, msg.progress)
        if _fences(iteration, client.client_id, msg.task_epoch):
            fenced = ev.ClientFenced(
                iteration.iteration_id, client.client_id, msg.task_epoch
            )
            self.apply(fenced)
        out = self._recover(iteration.iteration_id)
        self._deal_progress(iteration, msg.deal)
        for task_id in msg.finished_tasks:
            task = iteration.tasks.get(task_id)
            if task is not None:
                out += self._finish(task)
        wanted = (msg.current_round or 0) + ROUND_MARGIN
        if iteration.schedule and wanted > iteration.horizon:
            self.apply(ev.HorizonExtended(iteration.iteration_id, wanted))
        state = self._state_of(client, msg.request_id, msg.known)
        if msg.share_traces:
            name = f"trainer {client.client_id}"
            if msg.consumer_index is not None:
                name += f" (rank {msg.consumer_index})"
            trace = self.traces.announce(("client", client.client_id), name, _ns(now))
            state = dataclasses.replace(state, trace=trace)
        return [(peer, state), *out]

    def _deal_progress(self, iteration: model.Iteration, position: list[int]) -> None:
        """Multi-rank reads: a consumer's position; releases splits all are past."""
        job = self.records.jobs[iteration.job_id]
        if not job.dealt or len(position) != 3 or iteration.finished:
            return
        consumer, ordinal, index = position
        num_consumers = job.num_consumers or 1
        if not 0 <= consumer < num_consumers:
            return
        positions = self.deal_positions.setdefault(iteration.iteration_id, {})
        positions[consumer] = [ordinal, index]
        below = dealing.released_below(iteration, positions, num_consumers)
        if below > iteration.released:
            self.apply(ev.SplitsReleased(iteration.iteration_id, below))
        total = dealing.splits_of(self.records.datasets[job.dataset_id]).count()
        if ordinal >= total and consumer not in iteration.done_consumers:
            self.apply(ev.DealConsumerDone(iteration.iteration_id, consumer))
        if len(iteration.done_consumers) >= num_consumers:
            self.deal_positions.pop(iteration.iteration_id, None)

    def _ack(self, iteration: model.Iteration, acked: list[list[int]]) -> None:
        """Applies a consumer's acknowledgements (``[task_id, lo, hi, ...]``).

        Only those that change something are events: keys of an unknown task,
        or of an iteration that does not track them, are ignored.
        """
        if not acked or not self.records.tracked(iteration):
            return
        for task_id, *keys in acked:
            held = iteration.unacked(task_id)
            if held is not None and _overlaps(held, keys):
                self.apply(ev.RangesAcked(iteration.iteration_id, task_id, tuple(keys)))

    def _outputs_acked(
        self, iteration: model.Iteration, progress: list[list[int]]
    ) -> None:
        """Keeps the marks of a consumer's heartbeat that say more than those kept.

        Only for roots whose keys are still owed (after the keys it acknowledged
        with them), up to ``MAX_MARKS`` roots per iteration.
        """
        if not progress or not self.records.tracked(iteration):
            return
        kept = iteration.progress
        news = []
        for numbers in progress[:REPORT_MARKS]:
            mark = unpack(numbers)
            if mark is None:
                continue
            root, path = mark
            known = unpack(kept.get(root[0], ()))
            if known is not None and known[0] == root and covers(known[1], path):
                continue
            if known is None and (
                len(kept) >= MAX_MARKS or not iteration.owes(root[0])
            ):
                continue
            news.append(tuple(pack(mark)))
        if news:
            self.apply(ev.OutputsAcked(iteration.iteration_id, tuple(news)))

    def _state_of(
        self, client: model.Client, request_id: int, known: int = 0
    ) -> m.IterationState:
        """``client``'s iteration state; ``unchanged`` if it ``known`` it.

        Multi-rank reads are always told everything (their deal moves on).
        """
        iteration = self.records.iterations[client.iteration_id]
        job = self.records.jobs[iteration.job_id]
        state = replies.iteration_state(
            self.records,
            self.config,
            client,
            request_id,
            self.incarnation,
            known=0 if job.dealt else known,
        )
        if not job.dealt:
            return state
        splits = dealing.splits_of(self.records.datasets[job.dataset_id])
        return dataclasses.replace(
            state, deal=dealing.state_of(iteration, splits.count())
        )

    def _release_client(
        self, peer: bytes, msg: m.ReleaseIterationClient, now: float
    ) -> list[Outgoing]:
        client = self.records.clients.get(msg.client_id)
        out: list[Outgoing] = []
        if client is not None:
            iteration = self.records.iterations[client.iteration_id]
            self._ack(iteration, msg.acked)
            self._deal_progress(iteration, msg.deal)
            out = self._release(client, now)
        return [(peer, m.Ok(request_id=msg.request_id)), *out]

    def _release(self, client: model.Client, now: float) -> list[Outgoing]:
        """A client leaves; lost tasks' keys it held back may need a new task."""
        self.apply(ev.ClientReleased(client.client_id, now))
        return self._recover(client.iteration_id)

    # ------------------------------------------------------------ tasks

    def _create_task(self, iteration_id: int, worker_id: int) -> model.Task:
        """A task for ``worker_id``.

        In a running coordinated iteration it joins the schedule at the horizon,
        a round no consumer has reached.
        """
        task_id = self.records.next_id
        self.apply(ev.TaskCreated(task_id, iteration_id, worker_id))
        iteration = self.records.iterations[iteration_id]
        if iteration.schedule:
            task_ids = (*iteration.schedule[-1][1], task_id)
            self.apply(ev.ScheduleChanged(iteration_id, iteration.horizon, task_ids))
        return self.records.tasks[task_id]

    def _finish(self, task: model.Task) -> list[Outgoing]:
        if task.finished:
            return []
        self.apply(ev.TaskFinished(task.task_id))
        return self._recover(task.iteration_id)

    def _recover(self, iteration_id: int, lost: bool = False) -> list[Outgoing]:
        """Exactly once: a new task for keys to hand out again, if none would.

        Needed when every task of the iteration is finished or lost: the
        least busy live worker that serves the job gets one (none: the next
        worker to register does). Multi-rank reads get one at every loss
        (``lost``): the other tasks may be stopped by full buffers of later
        splits, which no reader can place before the lost ones are made.
        """
        iteration = self.records.iterations.get(iteration_id)
        if (
            iteration is None
            or not (iteration.pending or iteration.lost_splits)
            or not self._running(iteration)
        ):
            return []
        if not (lost and iteration.lost_splits) and not all(
            task.finished for task in iteration.tasks.values()
        ):
            return []
        workers = self._serving(self.records.jobs[iteration.job_id])
        if not workers:
            return []
        busy = self.records.worker_tasks
        worker = min(workers, key=lambda w: len(busy.get(w.worker_id, ())))
        logger.info(
            "iteration %d: a new task on worker %s hands out again %d lost keys, "
            "%d lost splits",
            iteration_id,
            worker.worker_address,
            iteration.pending.count_keys(),
            len(iteration.lost_splits),
        )
        return [self._push(self._create_task(iteration_id, worker.worker_id))]

    def _iteration(self, iteration_id: int) -> model.Iteration:
        iteration = self.records.iterations.get(iteration_id)
        if iteration is None:
            raise NotFoundError(f"iteration {iteration_id} does not exist")
        return iteration

    @staticmethod
    def _running(iteration: model.Iteration) -> bool:
        return not iteration.finished and not iteration.collected

    def _serves(self, iteration: model.Iteration, worker: model.Worker) -> bool:
        return placement.serves(self.records.jobs[iteration.job_id], worker)

    def _task_def(self, task: model.Task) -> dict[str, Any]:
        held = self.held_pipelines.get(task.worker_id, frozenset())
        return replies.task_def(self.records, self.config, task, held).to_wire()

    def _push(self, task: model.Task) -> Outgoing:
        """Tells ``task``'s worker to start it now (heartbeats are the fallback)."""
        worker = self.records.workers[task.worker_id]
        return worker.peer, m.ProcessTask(tasks=[self._task_def(task)])

    def _registered(self, request_id: int, worker: model.Worker) -> m.Message:
        return replies.registered(self.records, self.config, request_id, worker)

    # ------------------------------------------------------------ saves

    def _start_save(self, peer: bytes, msg: m.StartSave, now: float) -> list[Outgoing]:
        """Starts a ``distributed_save`` (or finds the one of this dataset and path).

        Claims the path first (``snapshot.begin``: refused if it holds another
        save or cannot be written), then journals the save.
        """
        dataset = self._dataset(msg.dataset_id)
        for save in self.records.saves.values():
            if save.path != msg.path:
                continue
            if save.dataset_id == msg.dataset_id and not save.error:
                reply = m.StartSaveReply(
                    request_id=msg.request_id, save_id=save.save_id
                )
                return [(peer, reply)]
            failed = f", which failed: {save.error}" if save.error else ""
            raise FailedPreconditionError(
                f"{msg.path!r} holds save {save.save_id} of dataset "
                f"{save.dataset_id}{failed}; save to another path"
            )
        saving.check_savable(dataset)
        save_id = uuid.uuid4().hex[:16]
        snapshot.begin(msg.path, save_id)
        num_splits = saving.splits_of(dataset).count()
        self.apply(
            ev.SaveStarted(
                save_id,
                msg.path,
                msg.dataset_id,
                msg.compression,
                num_splits,
                time.time(),
            )
        )
        logger.info(
            "save %s of dataset %s to %s: %d splits",
            save_id,
            msg.dataset_id,
            msg.path,
            num_splits,
        )
        self._finish_if_complete(self.records.saves[save_id])
        return [(peer, m.StartSaveReply(request_id=msg.request_id, save_id=save_id))]

    def _get_save_split(
        self, peer: bytes, msg: m.GetSaveSplit, now: float
    ) -> list[Outgoing]:
        """Takes a worker's chunks written, and hands it the next split to write."""
        worker = self.records.workers.get(msg.worker_id)
        if worker is None:  # a save runner asks on a socket of its own
            raise NotFoundError(
                f"worker {msg.worker_id} is not registered; register again"
            )
        save = self.records.saves.get(msg.save_id)
        done: list[Outgoing] = [
            (peer, m.GetSaveSplitReply(request_id=msg.request_id, done=True))
        ]
        if save is None or save.ended:
            return done
        for ordinal, name, elements, nbytes, crc32 in msg.chunks:
            if ordinal < save.num_splits and ordinal not in save.chunks:
                self.apply(
                    ev.ChunkSaved(save.save_id, ordinal, name, elements, nbytes, crc32)
                )
            self.save_runs.committed(save.save_id, ordinal)
        if msg.failed:
            self._end_save(save, f"worker {worker.worker_address}: {msg.failed}")
            return done
        if self._finish_if_complete(save):
            return done
        ordinal = self.save_runs.next_split(save, worker.worker_id)
        if ordinal is None:  # others write the rest
            return [(peer, m.GetSaveSplitReply(request_id=msg.request_id))]
        splits = saving.splits_of(self.records.datasets[save.dataset_id])
        lo, hi = splits.at(ordinal)[:2]
        reply = m.GetSaveSplitReply(request_id=msg.request_id, split=[ordinal, lo, hi])
        return [(peer, reply)]

    def _finish_if_complete(self, save: model.Save) -> bool:
        """Writes the manifest once every split has its chunk; whether it ended."""
        if len(save.chunks) < save.num_splits:
            return False
        chunks = [
            {"name": c[0], "elements": c[1], "bytes": c[2], "crc32": c[3]}
            for _, c in sorted(save.chunks.items())
        ]
        try:
            snapshot.write_manifest(
                save.path,
                element_spec=self.records.datasets[save.dataset_id].element_spec,
                chunks=chunks,
                compression=save.compression,
                cardinality=sum(c["elements"] for c in chunks),
                dataset_id=save.dataset_id,
            )
        except (OSError, ZmqDataError) as error:
            self._end_save(save, f"its manifest could not be written: {error}")
            return True
        self._end_save(save, "")
        return True

    def _end_save(self, save: model.Save, error: str) -> None:
        self.apply(ev.SaveEnded(save.save_id, error))
        self.save_runs.forget(save.save_id)
        if error:
            logger.warning("save %s to %s failed: %s", save.save_id, save.path, error)
        else:
            logger.info("save %s to %s finished", save.save_id, save.path)

    # ------------------------------------------------------------ status

    def _get_status(self, peer: bytes, msg: m.GetStatus, now: float) -> list[Outgoing]:
        reply = m.GetStatusReply(request_id=msg.request_id, status=self.status(now))
        return [(peer, reply)]

    # ------------------------------------------------------------ traces

    def _start_trace(
        self, peer: bytes, msg: m.StartTrace, now: float
    ) -> list[Outgoing]:
        """Opens a trace window: peers hear of it with their next heartbeat.

        Workers are woken now (a reply to no request, saying so): a quiet one
        would otherwise hear of it up to a quarter of ``worker_timeout_ms``
        late; they heartbeat at once and learn it with its clock.
        """
        self._close_trace(now)
        window = self.traces.start(msg.seconds, _ns(now), random.getrandbits(48) + 1)
        self.tracer.open(window.trace_id, window.until_ns)
        reply = m.StartTraceReply(
            request_id=msg.request_id,
            trace_id=window.trace_id,
            start_ns=window.start_ns,
            until_ns=window.until_ns,
        )
        wake = m.WorkerHeartbeatReply(trace=[window.trace_id, window.until_ns, 0])
        workers = self.records.workers.values()
        return [(peer, reply), *((worker.peer, wake) for worker in workers)]

    def _get_trace(self, peer: bytes, msg: m.GetTrace, now: float) -> list[Outgoing]:
        self._close_trace(now)
        records = self.records

        def live(key: traces.PeerKey) -> bool:
            kind, peer_id = key
            return peer_id in (records.workers if kind == "worker" else records.clients)

        return [(peer, self.traces.answer(msg, _ns(now), live))]

    def _trace_spans(
        self, peer: bytes, msg: m.TraceSpans, now: float
    ) -> list[Outgoing]:
        """A peer's spans, from its own socket (a worker) or key (``access.py``)."""
        if msg.worker_id:
            worker = self.records.workers.get(msg.worker_id)
            if worker is None or worker.peer != peer or msg.client_id:
                raise NotFoundError(f"worker {msg.worker_id!r:.30} is not this peer")
            key: traces.PeerKey = ("worker", msg.worker_id)
        else:
            key = ("client", msg.client_id)
        self.traces.receive(key, msg)
        return [(peer, m.Ok(request_id=msg.request_id))]

    def _close_trace(self, now: float) -> None:
        """Keeps the dispatcher's spans once its window is over; forgets old ones."""
        now_ns = _ns(now)
        if self.tracer.due(now_ns):
            log = self.tracer.finish()
            if log is not None:
                self.traces.own(log)
        self.traces.expire(now_ns)


def _ns(now: float) -> int:
    """``now`` (``time.monotonic()``) in nanoseconds: the clock of spans.

    ``time.perf_counter_ns`` reads the same clock (CLOCK_MONOTONIC on Linux).
    """
    return round(now * 1e9)


def _overlaps(held: Ranges, keys: Sequence[int]) -> bool:
    """Whether any of ``keys`` (flat ranges) is in ``held``."""
    return any(
        held.missing(keys[i], keys[i + 1]) != [keys[i], keys[i + 1]]
        for i in range(0, len(keys), 2)
    )


def _fences(iteration: model.Iteration, client_id: int, epoch: int) -> bool:
    """Whether a client echoing ``epoch`` lets go of a lost task it held back."""
    return any(
        client_id in orphan["waiting"] and orphan["epoch"] <= epoch
        for orphan in iteration.orphans.values()
    )


def _fraction(value: float) -> float:
    """``value`` in [0, 1] (a hostile NaN is 0)."""
    return min(1.0, max(0.0, value))
