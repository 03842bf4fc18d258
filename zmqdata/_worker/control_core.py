"""``WorkerControl``: the worker's control decisions, with no socket or clock.

The loop (``control.py``) feeds it each message of the dispatcher
(``handle(message, now)``) and each tick (``tick(now)``, at which the core
reads the ``view`` the loop gave it: a ``WorkerView`` of what the loop owns,
its tasks, pipelines and drain requests), and carries out, in order, the
instructions returned (``Instruction``s, as the other roles' cores): ``Send`` a
message, ``StartTasks``, ``DeleteTask``, ``RunSaves``, ``Drain`` (every task
stops producing, every save stops), ``TraceSent`` and ``TraceReplied`` (the
tracer's round trips), ``Left`` (the worker may go). It registers (again
after the dispatcher forgets it, with backoff while unanswered), heartbeats
at a pace that stretches while nothing changes, and drains then leaves when
asked. A fake clock drives it in tests (``tests/worker/test_control_core.py``).

>>> view = WorkerView(tasks=[], held=list, stats=dict)
>>> registration = m.RegisterWorker(worker_address="w", data_address="d")
>>> core = WorkerControl(1.0, lambda: view, registration)
>>> [type(i).__name__ for i in core.register(now=0.0)]
['Send']
>>> core.handle(m.RegisterWorkerReply(request_id=1, worker_id=3), now=0.1)
[]
>>> core.tick(0.5), [type(i).__name__ for i in core.tick(1.1)]
([], ['TraceSent', 'Send'])
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zmqdata._runtime.clock import Backoff
from zmqdata._runtime.instruction import Instruction
from zmqdata._runtime.pace import HeartbeatPace
from zmqdata._version import PROTOCOL_VERSION
from zmqdata._wire import messages as m
from zmqdata._wire.deltas import HeartbeatDelta
from zmqdata._wire.versions import PeerVersion

logger = logging.getLogger("zmqdata.worker")

STRETCH = 4
"""A quiet worker whose tasks ask for splits skips heartbeats (each split
request shows the dispatcher it lives), yet sends its stats at least every
this many quiet intervals."""
REGISTER_FIRST_S = 0.05
"""The first wait for an answer to a registration (then doubling, jittered,
up to one heartbeat interval, never shorter than this)."""


def stretched_due(pace: HeartbeatPace, last_send: float, asked: float) -> float | None:
    """When a quiet worker heartbeats, given its last split request at ``asked``.

    A split request shows the dispatcher it lives: the heartbeat waits one
    interval past it, ``STRETCH`` intervals past the last heartbeat at most.
    None: not at its quiet ceiling (it heartbeats as paced).

    >>> pace = HeartbeatPace(1.0, quiet_max_s=2.5)
    >>> pace.interval = pace.max_s
    >>> stretched_due(pace, last_send=0.0, asked=3.0), stretched_due(pace, 0.0, 9.0)
    (5.5, 10.0)
    """
    if pace.interval < pace.max_s:
        return None
    return min(asked + pace.interval, last_send + STRETCH * pace.max_s)


@dataclass(frozen=True)
class WorkerView:
    """What the loop owns that the core decides on, as read at one tick.

    ``held`` and ``stats`` are read only when a heartbeat is due: reading the
    pipelines held drops those past capacity, and stats cost a pass over
    every task.
    """

    tasks: list[list[Any]]
    """``[task_id, drained]`` per task running."""
    held: Callable[[], list[str]]
    """The fingerprints of the pipelines held."""
    stats: Callable[[], dict[str, Any]]
    """The worker's stats (``stats.worker_stats``)."""
    asked_at: float = float("-inf")
    """When a task last asked for splits."""
    settled: bool = True
    """Whether every task can be left without losing what it holds."""
    drain_requested: bool = False
    leave_now: bool = False
    """Draining took too long: leave with what is held."""


@dataclass(frozen=True)
class Send(Instruction):
    """Send ``message`` to the dispatcher (``WorkerControl.encode``)."""

    message: m.Message


@dataclass(frozen=True)
class StartTasks(Instruction):
    """Start a runner per task (wire ``TaskDef``) not running yet."""

    tasks: list[dict[str, Any]]


@dataclass(frozen=True)
class DeleteTask(Instruction):
    """Stop and forget the runner of ``task_id``."""

    task_id: int


@dataclass(frozen=True)
class RunSaves(Instruction):
    """Run the saves listed (wire ``SaveDef``), stopping the others.

    A save run under another worker id than ``worker_id`` starts anew; none
    starts unless ``start``.
    """

    saves: list[dict[str, Any]]
    worker_id: int | None
    start: bool


@dataclass(frozen=True)
class Drain(Instruction):
    """Every task stops producing (``TaskRunner.drain``); every save stops."""


@dataclass(frozen=True)
class TraceSent(Instruction):
    """Heartbeat ``request_id`` left (its reply may open a trace window)."""

    request_id: int


@dataclass(frozen=True)
class TraceReplied(Instruction):
    """Heartbeat ``request_id`` was answered with ``trace``."""

    request_id: int
    trace: Any


@dataclass(frozen=True)
class Left(Instruction):
    """The worker may go: the dispatcher took its leave, or none can be told."""


class WorkerControl:
    """The worker's side of the control protocol: ``handle`` and ``tick``."""

    def __init__(
        self,
        heartbeat_s: float,
        view: Callable[[], WorkerView],
        registration: m.RegisterWorker | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.heartbeat_s = heartbeat_s
        self.view = view
        """What the loop owns, read at each tick (``WorkerView``)."""
        self.registration = registration or m.RegisterWorker(
            worker_address="", data_address=""
        )
        """What the worker registers as (each registration its own request id)."""
        self.pace = HeartbeatPace(heartbeat_s)
        """Longer intervals while nothing changes (``_runtime/pace.py``)."""
        self.deltas = HeartbeatDelta()
        """Heartbeats as deltas against the last one answered (``_wire/deltas.py``)."""
        self.peer = PeerVersion()
        """The dispatcher's protocol version (an older one if it says so)."""
        self.backoff = Backoff(
            REGISTER_FIRST_S,
            max(REGISTER_FIRST_S, heartbeat_s),
            rng=rng,
            minimum_s=REGISTER_FIRST_S,
        )
        """The waits between registrations unanswered."""
        self.worker_id: int | None = None
        self.request_id = 0
        self.next_send = 0.0
        self.last_send = 0.0
        self.reported: tuple[Any, ...] = ()
        """The tasks, pipelines and draining the last heartbeat reported."""
        self.quiet: int | None = None
        """The last heartbeat, if it reported nothing new (its request id)."""
        self.unanswered_since: float | None = None
        """When the first message the dispatcher has not answered yet went out."""
        self.draining = False
        self.leave_request: int | None = None
        self.trace_requests: set[int] = set()
        """The ``TraceSpans`` of the last report: their answers change nothing."""
        self._told_version: int | None = None

    def encode(self, message: m.Message, now: float) -> bytes:
        """``message`` at the dispatcher's version, sent at ``now``, awaiting an answer."""
        data = self.peer.encode(message, now)
        if self.unanswered_since is None:
            self.unanswered_since = now
        return data

    def next_id(self) -> int:
        """A new request id."""
        self.request_id += 1
        return self.request_id

    def silent_s(self, now: float) -> float:
        """How long the dispatcher has left a message unanswered."""
        since = self.unanswered_since
        return 0.0 if since is None else now - since

    def register(self, now: float) -> list[Instruction]:
        """Registers; again after a backoff delay unless answered."""
        registration = dataclasses.replace(self.registration, request_id=self.next_id())
        self.next_send = now + self.backoff.next_delay()
        return [Send(registration)]

    def handle(
        self, message: m.Message, now: float, version: int = PROTOCOL_VERSION
    ) -> list[Instruction]:
        """What to do with a message of the dispatcher, encoded at ``version``.

        What an older dispatcher refused is sent again at its version.
        """
        self.unanswered_since = None
        again = self.peer.received(message, version, now)
        if again is None:
            return self._on_message(message, now)
        if again and version != self._told_version:  # once, not at each probe
            logger.info("the dispatcher speaks protocol v%d: speaking it", version)
            self._told_version = version
        return [Send(refused) for refused in again]

    def _on_message(self, message: m.Message, now: float) -> list[Instruction]:
        if message.request_id in self.trace_requests:
            if isinstance(message, m.Error):
                logger.info("trace spans refused: %s", message.message)
            return []
        if isinstance(message, m.RegisterWorkerReply):
            return self._registered(message, now)
        if isinstance(message, m.WorkerHeartbeatReply):
            return self._answered(message, now)
        if isinstance(message, m.ProcessTask):
            return self._start(message.tasks)
        if isinstance(message, m.Error):
            return self._refused(message, now)
        return []

    def _registered(
        self, reply: m.RegisterWorkerReply, now: float
    ) -> list[Instruction]:
        """Registered: heartbeats from the base interval, with everything."""
        if self.worker_id is None:
            logger.info(
                "worker %s registered as %d",
                self.registration.worker_address,
                reply.worker_id,
            )
        self.worker_id = reply.worker_id
        self.deltas.reset()
        self.pace.set_ceiling(reply.heartbeat_max_ms / 1000 or None)
        self.pace.reset()
        self.backoff.reset()
        self.next_send = now + self.heartbeat_s
        return self._start(reply.tasks)

    def _answered(self, reply: m.WorkerHeartbeatReply, now: float) -> list[Instruction]:
        """A heartbeat answered: its tasks, deletions and saves; the next one's pace.

        A reply to no request (id 0) answers nothing: a trace window opened,
        the worker heartbeats now.
        """
        if not reply.request_id:
            self.pace.reset()
            self.next_send = now
            return []
        out: list[Instruction] = [TraceReplied(reply.request_id, reply.trace)]
        # A dispatcher older than deltas reads every heartbeat as complete.
        old = self.peer.version < m.ADDED_IN["worker_heartbeat.base"]
        self.deltas.answered(reply.request_id, resend=reply.resend or old)
        if reply.request_id == self.leave_request:
            logger.info(
                "worker %s left the dispatcher", self.registration.worker_address
            )
            return [*out, Left()]
        out += self._start(reply.new_tasks)
        out += [DeleteTask(task_id) for task_id in reply.tasks_to_delete]
        start = not self.draining and self.worker_id is not None
        out.append(RunSaves(reply.saves, self.worker_id, start))
        self._pace_after(reply)
        return out

    def _pace_after(self, reply: m.WorkerHeartbeatReply) -> None:
        """The next heartbeat: later after a quiet one answered with nothing new."""
        news = reply.new_tasks or reply.tasks_to_delete or reply.saves
        quiet = reply.request_id == self.quiet and not news and not reply.trace
        self.pace.after(changed=not quiet)
        self.next_send = self.last_send + self.pace.interval

    def _start(self, tasks: list[dict[str, Any]]) -> list[Instruction]:
        """Starts ``tasks``, unless draining (a leaving worker starts nothing)."""
        return [] if self.draining or not tasks else [StartTasks(tasks)]

    def _refused(self, error: m.Error, now: float) -> list[Instruction]:
        """An error: one that forgot this worker registers it again."""
        if error.code != "NOT_FOUND":
            logger.warning("dispatcher error: %s: %s", error.code, error.message)
            return []
        logger.info(
            "dispatcher forgot this worker (%s); registering again", error.message
        )
        self.worker_id = None
        return self.register(now)

    def tick(self, now: float) -> list[Instruction]:
        """Drains when asked; registers or heartbeats when due."""
        view = self.view()
        out, leaving = self._drain(now, view)
        if now < self.next_send:
            return out
        if self.worker_id is None:
            # Never registered, or forgotten: a draining worker has nothing to hand back.
            return [*out, Left()] if self.draining else [*out, *self.register(now)]
        return out + self._heartbeat(now, view, leaving, self.worker_id)

    def _drain(self, now: float, view: WorkerView) -> tuple[list[Instruction], bool]:
        """Drains once asked to; True when a heartbeat should say it leaves now.

        Draining: the tasks stop producing and the dispatcher, told at once,
        gives this worker no new task. Once every task is settled (its buffer
        read) the worker leaves.
        """
        if not view.drain_requested:
            return [], False
        if self.silent_s(now) > max(1.0, 3 * self.pace.max_s):
            return [Left()], False  # no dispatcher to tell: nothing to hand back
        out: list[Instruction] = []
        if not self.draining:
            self.draining = True
            logger.info("worker %s draining", self.registration.worker_address)
            out.append(Drain())
            self.next_send = now  # tell the dispatcher now
        if (view.settled or view.leave_now) and self.leave_request is None:
            self.next_send = now
            return out, True
        return out, False

    def _heartbeat(
        self, now: float, view: WorkerView, leaving: bool, worker_id: int
    ) -> list[Instruction]:
        """A heartbeat of ``worker_id``, unless a quiet one may wait."""
        held = view.held()
        reported = (view.tasks, held, self.draining)
        if reported == self.reported and self._alive_by_splits(now, view.asked_at):
            return []
        request_id = self.next_id()
        base, stats, pipelines = self.deltas.outgoing(view.stats(), held)
        heartbeat = m.WorkerHeartbeat(
            request_id=request_id,
            worker_id=worker_id,
            tasks=view.tasks,
            stats=stats,
            draining=self.draining,
            leaving=leaving,
            pipelines=pipelines,
            base=base,
        )
        self.deltas.sent(request_id)
        if leaving:
            self.leave_request = request_id
        self.quiet = request_id if reported == self.reported else None
        if self.quiet is None:
            self.pace.reset()
        self.reported, self.last_send = reported, now
        self.next_send = now + self.pace.interval
        # The tracer notes the heartbeat before it leaves: its reply's clock.
        return [TraceSent(request_id), Send(heartbeat)]

    def _alive_by_splits(self, now: float, asked: float) -> bool:
        """Whether a quiet heartbeat may wait (then pushes it back).

        It may when a task asked for splits (at ``asked``) within the
        interval, which showed the dispatcher this worker lives (protocol 6
        on), for ``STRETCH`` intervals at most.
        """
        if (
            self.quiet is None
            or self.peer.version < m.ADDED_IN["get_split_reply.period_ms"]
        ):
            return False
        due = stretched_due(self.pace, self.last_send, asked)
        if due is None or due <= now:
            return False
        self.next_send = due
        return True
