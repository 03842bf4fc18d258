"""The dispatcher's state machine: pure, no sockets, no clock of its own.

``handle(peer, message, now)`` applies one request and returns the messages to
send, as ``Outgoing`` ``(peer, message)`` pairs (``outgoing.py``: the
``Instruction`` of this role's core); ``handle_group`` does the same for every
request waiting, with one commit for them all; ``tick(now)`` does the periodic
work (worker and client liveness, job GC, the autoscaler's signals). Tests
drive it with a fake clock.

The tables live in ``self.records`` (``records.py``), changed only by events
passed to ``apply``, which first hands each to the injected ``EventSink`` (in
fault-tolerant mode ``journal.JournalSink``, which also decides when to
compact). Group commit: once a group's requests are applied the sink keeps
their events (one fsync) before any of their replies is returned; if it
cannot, the state rolls back to what was kept and every request of the group
is answered ``UNAVAILABLE``.

This module holds the state and that machinery; each request's handler is a
plain function of the state (``_HANDLERS``), in the module of its concern:

* workers' registrations, heartbeats and removal: ``workers.py``;
* consumers' iteration clients (acquire, heartbeat, release): ``consumers.py``,
  and what they acknowledge and fence (exactly once): ``acks.py``;
* ``GetSplit``: ``split_requests.py`` (DYNAMIC split plans in ``splits.py``,
  multi-rank deals in ``dealing.py``);
* datasets and jobs: ``jobs.py``;
* ``distributed_save``: ``save_requests.py`` (who writes what: ``saving.py``);
* traces: ``trace_requests.py`` (the window and spans: ``traces.py``);
* tasks made, pushed, finished and made again for lost keys, shared by all of
  them: ``tasking.py``;
* what ticks do as time passes (silent peers, fences, job GC): ``timeouts.py``.

Request checks are in ``checks.py``, which workers serve which jobs in
``placement.py``, task definitions and iteration states in ``replies.py``,
workers' stats in ``samples.py``, peers' liveness in ``liveness.py``, the
autoscaler in ``autoscale.py`` and the status in ``status.py``.

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

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import (
    autoscale,
    checks,
    consumers,
    jobs,
    readers,
    samples,
    save_requests,
    saving,
    split_requests,
    status,
    timeouts,
    trace_requests,
    traces,
    workers,
)
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.consumers import ROUND_MARGIN
from zmqdata._dispatcher.empty_passes import EmptyPasses
from zmqdata._dispatcher.liveness import Liveness
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.protocols import Protocols
from zmqdata._dispatcher.records import EventSink, NoJournal
from zmqdata._dispatcher.splits import Splits
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata._runtime.spans import Tracer
from zmqdata._wire import messages as m
from zmqdata.errors import (
    InvalidArgumentError,
    UnavailableError,
    ZmqDataError,
    to_code,
)

logger = logging.getLogger("zmqdata.dispatcher")

Handler = Callable[["DispatcherState", bytes, Any, float], list[Outgoing]]

AUTOSCALE_EVERY_S = 0.5
"""How often the autoscaler observes demand and supply (``autoscale.py``)."""
AUTOSCALE_PEERS_PER_S = 10_000
"""Workers and consumers the autoscaler's signals may scan a second: past
5,000 it observes less often than ``AUTOSCALE_EVERY_S`` (every 2 s at 20,000:
five observations in its default 10 s window)."""
STALLED_S = 1.0
"""A loop tick this late (or half the shortest peer timeout, when less) means
the dispatcher itself stalled: ``stall_s``."""

__all__ = ["ROUND_MARGIN", "DispatcherState"]


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
        self.liveness_due = float("-inf")
        """The next scan for silent peers (``timeouts.drop_silent``; not state)."""
        self.awake_since = now
        """Silence counts from here at the earliest (``resumed``)."""
        self._failed_groups = RateLimitedLog(logger)  # a full disk: one per group
        self.liveness = Liveness(now)
        """When each peer was last heard from (beside the records: ``liveness.py``)."""
        self.curve_key = ""
        """The CurveZMQ public key of the request being handled ("": plain): the
        owner of an iteration client it acquires (``consumers.py``)."""
        # Metrics, not state: like heartbeat times, none of these is an event.
        self.worker_samples: dict[int, samples.WorkerSample] = {}
        self.held_pipelines: dict[int, frozenset[str]] = {}
        """The pipelines each worker said it holds (``_worker/pipelines.py``)."""
        self.split_plans: dict[tuple[str, int | None, int, bool], Splits] = {}
        """Split plans by dataset, seed and repetition, made once
        (``split_requests.py``)."""
        self.requests_total = 0
        self.errors_total = 0
        self.splits_total = 0
        self.protocols = Protocols()
        """The protocol version each peer speaks (the server fills it in)."""
        # Autoscaling (``autoscale.py``): liveness data too, resent by every heartbeat.
        self.autoscaler = autoscale.Autoscaler()
        self.draining: set[int] = set()
        """Workers leaving: they get no new task and do not count as supply."""
        self.fills: dict[int, float] = {}
        """Each worker's last ``buffer_fill`` (supply), kept as it arrives: the
        autoscaler's signals sum them, never walking every worker's stats."""
        self.reads: dict[int, readers.Reads] = {}
        """Each consumer's reported waits and reads over the last minute (demand)."""
        self.ignored_errors: dict[int, dict[int, tuple[int, str]]] = {}
        """Job id -> task id -> errors its ``ignore_errors`` skipped, and the last
        (the task whose count changed last is last)."""
        self.save_runs = saving.SaveRuns()
        """Which worker writes which split of each running save (liveness)."""
        self.empty_passes: dict[int, EmptyPasses] = {}
        """DYNAMIC endless repeats, liveness: iteration id -> who took the
        splits of its last repetition and who found nothing (``empty_passes.py``)."""
        self.deal_positions: dict[int, dict[int, list[int]]] = {}
        """Multi-rank reads, liveness: iteration id -> consumer index -> the
        ``[ordinal, index]`` of the first element it has not received."""
        self._autoscale_due = float("-inf")
        self.traces = traces.Traces()
        """The trace window and the spans peers sent for it (not state)."""
        self.tracer = Tracer()
        """The dispatcher's own spans: each request handled, while a window is open."""

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
            self.fills.pop(event.worker_id, None)
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
                    Outgoing(
                        peer,
                        m.Error(request_id=message.request_id, code=code, message=text),
                    )
                ]
                for peer, message in requests
            ]
        return outgoing

    def _roll_back(self, now: float) -> None:
        """Back to the records the sink kept, after it failed to keep a group.

        Liveness and job GC's clock are beside the records: unchanged.
        """
        self.records = self._sink.restore(now)
        self.liveness_due = float("-inf")  # scan again: peers may be back

    def _handle(
        self, peer: bytes, message: m.Message, now: float, key: str
    ) -> list[Outgoing]:
        """One request of a group, from CurveZMQ ``key``: what to send once kept."""
        handler = _HANDLERS.get(type(message))
        self.curve_key = key
        self.requests_total += 1
        try:
            if handler is None:
                raise InvalidArgumentError(
                    f"{message.TYPE!r} is not a dispatcher request"
                )
            checks.check_request(message, self.config)
            log = self.tracer.log
            if log is None:
                return handler(self, peer, message, now)
            start = time.perf_counter_ns()
            try:
                return handler(self, peer, message, now)
            finally:
                log.add(message.TYPE, "dispatcher", start, time.perf_counter_ns())
        except Exception as error:  # a bug or hostile input: answer, never crash
            if not isinstance(error, ZmqDataError):
                logger.exception("dispatcher failed on %s", message.TYPE)
            code, text = to_code(error)
            reply = m.Error(request_id=message.request_id, code=code, message=text)
            self.errors_total += 1
            return [Outgoing(peer, reply)]

    def tick(self, now: float) -> list[Outgoing]:
        """Periodic work: drops silent workers and clients; job GC (``timeouts.py``).

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
        if now >= self.liveness_due:
            self.liveness_due = timeouts.drop_silent(self, now, out)
        if self._gc_due is None or now >= self._gc_due:
            self._gc_due = now + self.config.job_gc_check_interval_ms / 1000
            timeouts.collect_iterations(self, now)
        if now >= self._autoscale_due:
            peers = len(self.records.workers) + len(self.records.clients)
            every = max(AUTOSCALE_EVERY_S, peers / AUTOSCALE_PEERS_PER_S)
            self._autoscale_due = now + every
            self.autoscaler.observe(self._signals(now))
        trace_requests.close_trace(self, now)
        return out

    def resumed(self, now: float) -> None:
        """The dispatcher itself stood still until ``now`` (``stall_s``).

        Every peer's silence and every fence timeout counts again from now:
        heartbeats that waited in its queue, or were never sent while their
        process stood still with it (one process: a collector pause), are
        not silence.
        """
        self.awake_since = now

    def _signals(self, now: float) -> autoscale.Signals:
        """Demand and supply now: what the autoscaler observes."""
        fills, draining = self.fills, self.draining
        total, count = sum(fills.values()), len(fills)
        for worker_id in draining & fills.keys():  # (few)
            total, count = total - fills[worker_id], count - 1
        # (a consumer not heard yet waited 0: as none may have, the max is >= 0)
        starved = max((r.last_starved for r in self.reads.values()), default=0.0)
        return autoscale.Signals(
            now,
            len(self.records.workers) - len(draining),
            starved if self.records.clients else None,
            consumers.fraction(total / count) if count else None,
        )


def _get_status(
    state: DispatcherState, peer: bytes, msg: m.GetStatus, now: float
) -> list[Outgoing]:
    reply = m.GetStatusReply(request_id=msg.request_id, status=state.status(now))
    return [Outgoing(peer, reply)]


_HANDLERS: dict[type[m.Message], Handler] = {
    m.RegisterWorker: workers.register,
    m.WorkerHeartbeat: workers.heartbeat,
    m.GetSplit: split_requests.get_split,
    m.GetOrRegisterDataset: jobs.get_or_register_dataset,
    m.GetDatasetInfo: jobs.get_dataset_info,
    m.GetOrCreateJob: jobs.get_or_create_job,
    m.GetOrCreateIteration: consumers.get_or_create_iteration,
    m.ClientHeartbeat: consumers.heartbeat,
    m.ReleaseIterationClient: consumers.release_client,
    m.GetStatus: _get_status,
    m.StartTrace: trace_requests.start_trace,
    m.GetTrace: trace_requests.get_trace,
    m.TraceSpans: trace_requests.trace_spans,
    m.StartSave: save_requests.start_save,
    m.GetSaveSplit: save_requests.get_save_split,
}
"""The request handlers, by request type: each takes the state, the peer, the
request and the time, and returns what to send to whom."""
