"""``ReadCore``: a reader's decisions, pure: no sockets, no clock of its own.

The dispatcher's shape (``_dispatcher/state.py``): the fetcher thread
(``reader.Fetcher``) owns the sockets and feeds the core what happens
(``instructions``' events: the dispatcher's replies, the workers' replies,
lost links, sends it could not queue) with ``handle(event, now)``, and
``tick(now)``; both return instructions (send to a worker, to the dispatcher,
deliver to the trainer, end, fail), which the fetcher carries out. The core
keeps the task table, decides when to heartbeat, when the read has ended or
failed, and leaves how to ask workers for elements to its ``Plan``: first come,
first served (``credit.CreditPlan``), coordinated rounds (``rounds.RoundPlan``)
or dealt turns (``dealing.DealPlan``), whose methods return instructions too.
Tests drive it with a fake clock (``tests/client``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from zmqdata._client.acks import Acks
from zmqdata._client.hold import Hold
from zmqdata._client.instructions import (
    Batch,
    Broken,
    Closing,
    Deliver,
    Drained,
    Dropped,
    End,
    Event,
    Fail,
    FromDispatcher,
    FromWorker,
    Instruction,
    LinksLost,
    Started,
    ToDispatcher,
    Unsent,
)
from zmqdata._client.options import ReadOptions, Timeouts
from zmqdata._client.traces import sharing
from zmqdata._config import MIN_FENCE_TIMEOUT_MS
from zmqdata._runtime.clock import Backoff
from zmqdata._runtime.pace import HeartbeatPace
from zmqdata._runtime.process import PROCESS_TOKEN
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import TaskInfo
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    UnavailableError,
    ZmqDataError,
    from_code,
)

END = object()
"""Put on the trainer's queue when the read is over."""
SILENCE_S = MIN_FENCE_TIMEOUT_MS / 2000
"""Exactly once: a reader that sent no heartbeat for this long (its process
frozen, its thread starved) may have been fenced out of a lost task
(``DispatcherConfig.fence_timeout_ms``, at least twice this): what it receives
then waits for the dispatcher's answer, which says which tasks are still read.
A dispatcher that says its ``fence_timeout_ms`` gives half of it instead."""
QUIET_SHARE = 0.8
"""A quiet reader's longest interval, as a share of the fence timeout: the
dispatcher never stops waiting for its fence. Past its silence threshold (half
of it) a quiet reader holds what arrives until its next answer, one round trip
(``quiet_ceiling_s``)."""


def quiet_ceiling_s(fence_timeout_ms: int) -> float:
    """A quiet reader's longest heartbeat interval under ``fence_timeout_ms``.

    Quiet, it has nothing unacknowledged: being past its silence threshold
    costs it one round trip on the elements that arrive next (held until the
    dispatcher answers), never a duplicate. ``QUIET_SHARE`` of the fence
    timeout keeps it within what the dispatcher waits for a fence.

    >>> quiet_ceiling_s(5_000), quiet_ceiling_s(0)  # 0: a dispatcher naming none
    (4.0, 1.6)
    """
    return QUIET_SHARE * max(MIN_FENCE_TIMEOUT_MS, fence_timeout_ms) / 1000


@dataclass
class Failure:
    """Put on the trainer's queue when the read failed."""

    error: BaseException


def not_found_backoff() -> Backoff:
    """Retries of a task its worker has not started yet: 4 ms doubling to 100 ms."""
    return Backoff(0.004, 0.1, rng=lambda: 1.0)


@dataclass
class Task:
    """A task this reader reads, and what it is owed by it."""

    task_id: int
    endpoint: str
    ticket: bytes = b""
    """CurveZMQ: the read ticket the dispatcher gave this client's key."""
    requests: dict[int, int] = field(default_factory=dict)
    """Requests in flight: request id -> elements asked for."""
    finished: bool = False
    retry_at: float = 0.0
    backoff: Backoff = field(default_factory=not_found_backoff)
    asked: int = 0
    """The request id of the last request sent (credit goes to the longest idle)."""

    @property
    def outstanding(self) -> int:
        """Elements asked for and not answered yet."""
        return sum(self.requests.values())

    def retry_later(self, now: float) -> None:
        """Asks this task again after the next backoff delay."""
        self.retry_at = now + self.backoff.next_delay()


@dataclass
class Counters:
    """Single-writer counters: the fetcher writes ``received``, the trainer ``taken``."""

    received: int = 0
    received_bytes: int = 0
    taken: int = 0
    """Elements the trainer took off the queue (a batch at a time)."""
    held: Sized = ()
    """The trainer's batch being handed out (its ``deque``: the trainer pops it)."""
    consumed_bytes: int = 0
    starved: bool = False
    waited_s: float = 0.0
    """Seconds the trainer waited with nothing buffered (written by the trainer)."""
    sizes: deque[int] = field(default_factory=lambda: deque(maxlen=64))

    @property
    def consumed(self) -> int:
        """Elements handed to the trainer's code: those taken, less the batch's rest.

        No count per element: read from the fetcher between the trainer's
        steps, it may lag a batch behind (less credit, never more).
        """
        return self.taken - len(self.held)

    def average_size(self) -> int | None:
        """Decoded bytes per element over the last replies (None before any)."""
        if not self.sizes:
            return None
        return max(1, sum(self.sizes) // len(self.sizes))


class LinkState(Protocol):
    """The connection state of the reader's worker links (``links.Links``)."""

    def lost(self, endpoint: str) -> bool:
        """Whether ``endpoint`` was connected and is not now."""

    def down_for(self, endpoint: str, now: float) -> float:
        """Seconds ``endpoint`` has been without a connection (0 while up)."""


class Plan(Protocol):
    """How a reader asks its tasks for elements."""

    def current_round(self) -> int | None:
        """The round reported in heartbeats (None: first come, first served)."""

    def deal_position(self) -> list[int]:
        """Multi-rank reads: what heartbeats report (``ClientHeartbeat.deal``)."""

    def on_state(self, core: ReadCore, state: m.IterationState) -> list[Instruction]:
        """Follows a new task list (tasks gone are already forgotten)."""

    def forget(self, task: Task) -> None:
        """Drops ``task``'s requests in flight, which will never be answered."""

    def request_more(self, core: ReadCore, now: float) -> list[Instruction]:
        """The requests the free credit allows."""

    def on_elements(
        self, core: ReadCore, header: m.Elements, reply: FromWorker, now: float
    ) -> list[Instruction]:
        """Takes a data reply."""

    def on_error(self, core: ReadCore, error: m.Error, now: float) -> list[Instruction]:
        """Takes an error reply from a worker."""

    def on_unsent(self, request: m.GetElements, now: float) -> None:
        """Takes back ``request``, which could not be sent: asks again later."""


class ReadCore:
    """One reader's tasks, liveness and end, asking for elements through ``plan``."""

    def __init__(
        self,
        options: ReadOptions,
        timeouts: Timeouts,
        client_id: int,
        counters: Counters,
        plan: Plan,
        links: LinkState,
        now: float,
    ) -> None:
        self.options, self.timeouts, self.client_id = options, timeouts, client_id
        self.counters, self.plan, self.links = counters, plan, links
        self.tasks: dict[int, Task] = {}
        self.acks = Acks()
        """Exactly once: keys received, reported until the dispatcher confirms."""
        self._task_epoch = 0
        """The task epoch of the last state applied (tasks it dropped are not read)."""
        self._fenced_epoch = 0
        """The epoch last reported: every ack of the tasks dropped by then is sent."""
        self._last_heartbeat = now
        self._hold: Hold[tuple[m.Elements, Batch]] = Hold()
        """Exactly-once replies received after a silence, not acknowledged yet."""
        self.done = False
        self._finished = False
        self._incarnation: str | None = None
        self._heartbeat_due = 0.0
        self._waited = (now, 0.0)
        """When the last heartbeat was sent, and ``counters.waited_s`` then."""
        self._last_dispatcher_reply = now
        self._last_worker_reply = now
        self._request_id = 0
        self.silence_s = SILENCE_S
        """How long without a heartbeat makes this reader possibly fenced."""
        self.pace = HeartbeatPace(timeouts.heartbeat_s, quiet_ceiling_s(0))
        """The interval to the next heartbeat: longer while nothing changes."""
        self._revision = 0
        """The ``IterationState.revision`` applied last (heartbeats echo it)."""
        self._quiet: int | None = None
        """The last heartbeat, if it reported nothing new (its request id)."""
        self._reported: tuple[int | None, list[int]] = (None, [])
        """The round and multi-rank position the last heartbeat reported."""
        self._handlers: dict[type[Any], Callable[[Any, float], list[Instruction]]] = {
            Started: lambda event, _: self.apply_state(event.state),
            FromDispatcher: lambda event, now: self.on_dispatcher(event.message, now),
            FromWorker: self.on_worker,
            LinksLost: lambda event, now: self.on_links_lost(event.endpoints, now),
            Unsent: self.on_unsent,
            Broken: lambda event, _: self.fail(event.error),
            Drained: lambda _, now: self.request_more(now),
            Closing: lambda _, __: self.release(),
        }

    def next_request_id(self) -> int:
        """A new request id (heartbeats and data requests share the sequence)."""
        self._request_id += 1
        return self._request_id

    # ------------------------------------------------------------ events

    def handle(self, event: Event, now: float) -> list[Instruction]:
        """Takes one event of the shell; returns what to do."""
        return self._handlers[type(event)](event, now)

    def on_dispatcher(self, message: m.Message, now: float) -> list[Instruction]:
        """Takes a dispatcher reply."""
        self._last_dispatcher_reply = now
        if isinstance(message, m.IterationState):
            self.acks.confirmed(message.request_id)
            quiet = message.unchanged and message.request_id == self._quiet
            self.pace.after(changed=not quiet)
            self._heartbeat_due = self._last_heartbeat + self.pace.interval
            return self.apply_state(message)
        if isinstance(message, m.Error):
            return self.fail(from_code(message.code, message.message))
        return []

    def on_worker(self, reply: FromWorker, now: float) -> list[Instruction]:
        """Takes a worker reply (an undecodable one fails the read)."""
        self._last_worker_reply = now
        out = []
        if now - self._last_heartbeat > self.silence_s:  # silent: hold what comes
            out = self.heartbeat(now)
        header = reply.header
        try:
            if isinstance(header, m.Error):
                out += self.plan.on_error(self, header, now)
            elif isinstance(header, m.Elements):
                out += self.plan.on_elements(self, header, reply, now)
        except ZmqDataError as error:
            out += self.fail(error)
        return out

    def on_links_lost(self, endpoints: list[str], now: float) -> list[Instruction]:
        """A lost connection loses its replies: frees their credit for other tasks.

        The tasks are asked again once their worker is connected again.
        """
        out = []
        for task in self.tasks.values():
            if task.endpoint in endpoints:
                self.plan.forget(task)
                out += self.report_if_finished(task, now)
        return out

    def on_unsent(self, event: Unsent, now: float) -> list[Instruction]:
        """A request that could not be queued is asked again later."""
        self.plan.on_unsent(event.request, now)
        return []

    def tick(self, now: float) -> list[Instruction]:
        """Heartbeats when due; fails the read if the service went silent."""
        if self.done:
            return []
        out = self.heartbeat(now) if now >= self._heartbeat_due else []
        error = self._silence(now) or self._unreachable(now)
        if error is not None:
            return out + self.fail(error)
        return out + self.request_more(now)

    def request_more(self, now: float) -> list[Instruction]:
        """The requests the free credit allows (none once ended)."""
        return [] if self.done else self.plan.request_more(self, now)

    def release(self) -> list[Instruction]:
        """Releases this reader, with the acknowledgements not confirmed yet."""
        release = m.ReleaseIterationClient(
            client_id=self.client_id,
            acked=self.acks.report(self.next_request_id()),
            deal=self.plan.deal_position(),
        )
        return [ToDispatcher(release)]

    # ------------------------------------------------------------ dispatcher

    def heartbeat(self, now: float) -> list[Instruction]:
        """A heartbeat, with the tasks finished and owing nothing."""
        finished = [
            t.task_id for t in self.tasks.values() if t.finished and not t.requests
        ]
        request_id = self.next_request_id()
        acked = self.acks.report(request_id)
        progress = self.acks.progress(request_id)
        if self.acks.complete:  # no ack of a dropped task is left unsent
            self._fenced_epoch = self._task_epoch
        if now - self._last_heartbeat > self.silence_s:  # what comes next waits
            self._hold.begin(request_id)
        self._last_heartbeat = now
        reported = (self.plan.current_round(), self.plan.deal_position())
        beat = m.ClientHeartbeat(
            request_id=request_id,
            client_id=self.client_id,
            finished_tasks=finished,
            current_round=reported[0],
            acked=acked,
            progress=progress,
            task_epoch=self._fenced_epoch,
            starved=self._starved(now),
            deal=reported[1],
            consumed=self.counters.consumed,
            consumer_index=self.options.consumer_index,
            share_traces=sharing(),  # a trainer that shares traces hears of windows soon
            known=self._revision,
        )
        news = _has_news(beat) or reported != self._reported
        self._quiet = None if news else request_id
        self._reported = reported
        if news:
            self.pace.reset()
        self._heartbeat_due = now + self.pace.interval
        return [ToDispatcher(beat)]

    def _starved(self, now: float) -> float:
        """The fraction of the time since the last heartbeat the trainer waited."""
        since, waited = self._waited
        self._waited = (now, self.counters.waited_s)
        if now <= since:
            return 0.0
        return min(1.0, max(0.0, (self.counters.waited_s - waited) / (now - since)))

    def apply_state(self, state: m.IterationState) -> list[Instruction]:
        """Follows the dispatcher's task list and end of input."""
        if not self._same_incarnation(state):
            return self.fail(
                FailedPreconditionError(
                    f"dispatcher {self.options.service} restarted without "
                    "fault_tolerant_mode and lost this job's state; start a new iterator"
                )
            )
        if state.fence_timeout_ms:
            self.silence_s = max(SILENCE_S, state.fence_timeout_ms / 2000)
            self.pace.set_ceiling(quiet_ceiling_s(state.fence_timeout_ms))
        if state.unchanged:  # the tasks, end and schedule applied last hold
            return self._release_held(state.request_id)
        self._revision = state.revision
        try:
            infos = [TaskInfo.from_wire(info) for info in state.tasks]
        except InvalidArgumentError as error:
            return self.fail(error)
        self._follow_tasks(infos)
        # Nothing of a task dropped is taken any more (its replies answer
        # forgotten requests): the next heartbeat says so, acks included.
        self._task_epoch = state.task_epoch
        out = self._release_held(state.request_id)
        out += self.plan.on_state(self, state)
        self._finished = state.finished
        return out + self.maybe_end()

    def _same_incarnation(self, state: m.IterationState) -> bool:
        """Whether ``state`` comes from the dispatcher's first answer's incarnation."""
        if self._incarnation is None:
            self._incarnation = state.incarnation
        return state.incarnation == self._incarnation

    def _follow_tasks(self, infos: list[TaskInfo]) -> None:
        """Adds the tasks listed and wanted; forgets those no longer listed."""
        listed = set()
        for info in filter(self._wanted, infos):
            listed.add(info.task_id)
            if info.task_id not in self.tasks:
                self.tasks[info.task_id] = Task(
                    info.task_id, self._endpoint(info), info.ticket
                )
        for task_id in list(self.tasks):
            if task_id not in listed:  # its worker is gone: skip what it owed us
                self.plan.forget(self.tasks.pop(task_id))

    def endpoints(self) -> set[str]:
        """The worker endpoints some task is read from."""
        return {task.endpoint for task in self.tasks.values()}

    def _wanted(self, info: TaskInfo) -> bool:
        local = info.local_process == PROCESS_TOKEN
        return local or self.options.target_workers != "LOCAL"

    def _endpoint(self, info: TaskInfo) -> str:
        local = info.local_process == PROCESS_TOKEN and info.inproc_address
        if local and self.options.data_transfer_protocol in (None, "inproc"):
            return info.inproc_address
        return info.data_address

    # ------------------------------------------------------------ liveness

    def readable_tasks(self) -> list[Task]:
        """The tasks not at their end of input."""
        return [t for t in self.tasks.values() if not t.finished]

    def _silence(self, now: float) -> UnavailableError | None:
        """The dispatcher is silent and no worker is left to read from."""
        silent = now - self._last_dispatcher_reply
        workers_silent = now - self._last_worker_reply
        timeout = self.timeouts.dispatcher_timeout_s
        if silent > timeout and (not self.readable_tasks() or workers_silent > timeout):
            return UnavailableError(
                f"dispatcher {self.options.service} silent for {silent:.0f} s "
                "and no worker left to read from (or none answered for "
                f"{workers_silent:.0f} s)"
            )
        return None

    def _unreachable(self, now: float) -> UnavailableError | None:
        """A task's worker has been unreachable for too long."""
        timeout = self.timeouts.worker_timeout_s
        for task in self.readable_tasks():
            down = self.links.down_for(task.endpoint, now)
            if down > timeout:
                return UnavailableError(
                    f"worker {task.endpoint} (task {task.task_id}) unreachable "
                    f"for {down:.1f} s, over ZMQDATA_WORKER_TIMEOUT_S={timeout:g}: "
                    "is its advertised address reachable from this host?"
                )
        return None

    # ------------------------------------------------------------ ending

    def deliver(
        self,
        elements: list[Any],
        nbytes: int,
        task_id: int = 0,
        header: m.Elements | None = None,
    ) -> list[Instruction]:
        """Hands decoded elements to the trainer thread.

        Exactly once: the keys ``header`` says they (and, at the end, what the
        task dropped) cover are acknowledged as ``task_id``'s; after a silence
        they wait for the dispatcher's answer first (``_release_held``).
        """
        keys, widths = ([], []) if header is None else (header.lineage, header.widths)
        if elements:
            self.counters.sizes.append(max(1, nbytes // len(elements)))
            self.counters.received += len(elements)
            self.counters.received_bytes += nbytes
        batch = Batch(elements, nbytes if elements else 0, keys, widths, [])
        if header is not None and keys and self._hold.active:
            self._hold.keep(task_id, (header, batch))
            return []
        return self._hand_over(task_id, header, batch)

    def _hand_over(
        self, task_id: int, header: m.Elements | None, batch: Batch
    ) -> list[Instruction]:
        """Acknowledges ``batch``'s keys as ``task_id``'s; hands it to the trainer.

        An end of sequence with dropped keys only is consumed as well.
        """
        elements, keys = batch.elements, batch.keys
        self.acks.received(task_id, keys, [] if header is None else header.progress)
        if keys:  # acknowledged within one base interval, as ever
            self.pace.reset()
            self._heartbeat_due = min(
                self._heartbeat_due, self._last_heartbeat + self.pace.interval
            )
        return [Deliver(batch)] if elements or keys else []

    def _release_held(self, request_id: int) -> list[Instruction]:
        """The dispatcher answered a heartbeat sent after a silence: ends the hold.

        Replies of the tasks it still lists are delivered; those of tasks it
        dropped meanwhile are not (nor acknowledged): their keys may be handed
        out again already, since this reader was not waited for.
        """
        held = self._hold.release(request_id)
        if held is None:
            return []
        out: list[Instruction] = []
        dropped = 0
        for task_id, (header, batch) in held:
            if task_id in self.tasks:
                out += self._hand_over(task_id, header, batch)
            else:
                dropped += len(batch.elements)
                self.counters.received -= len(batch.elements)
                self.counters.received_bytes -= batch.nbytes
        return [*out, Dropped(dropped)] if dropped else out

    def deliver_dealt(
        self, elements: list[Any], anchors: list[int]
    ) -> list[Instruction]:
        """Multi-rank reads: elements in order, with their splits' ``[ordinal, offset]``."""
        self.counters.received += len(elements)
        return [Deliver(Batch(elements, 0, [], [], anchors))]

    def report_if_finished(self, task: Task, now: float) -> list[Instruction]:
        """Reports a task ended once nothing more is owed by it."""
        if task.finished and not task.requests:
            return self.heartbeat(now) + self.maybe_end()
        return []

    def maybe_end(self) -> list[Instruction]:
        """Ends once the iteration is over and nothing is owed to this reader.

        A LOCAL reader ends when every task it reads has ended: the tasks of
        other processes' workers, which it never reads, never finish for it.
        """
        busy = any(t.outstanding for t in self.tasks.values()) or self._hold.holding
        local_done = self.options.target_workers == "LOCAL" and bool(self.tasks)
        over = self._finished or local_done
        if over and not busy and not self.readable_tasks():
            return self.end()
        return []

    def end(self) -> list[Instruction]:
        """Ends the read: everything it gets was delivered (once)."""
        if self.done:
            return []
        self.done = True
        return [End()]

    def fail(self, error: BaseException) -> list[Instruction]:
        """Ends the read with ``error`` (once)."""
        if self.done:
            return []
        self.done = True
        return [Fail(error)]


def _has_news(beat: m.ClientHeartbeat) -> bool:
    """Whether ``beat`` reports something (a quiet one lets heartbeats grow rarer)."""
    return bool(
        beat.finished_tasks
        or beat.acked
        or beat.progress
        or beat.starved
        or beat.share_traces
    )
