"""The worker's control loop: its one DEALER to the dispatcher, one thread.

Registers (again after the dispatcher forgets it), heartbeats with its tasks'
stats as deltas at a pace that follows what changes, starts and deletes the
tasks the replies name, runs the saves they list (``saver.py``), drains and
leaves when asked, and warns while the dispatcher cannot be reached.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import Any

import zmq

from zmqdata._config import WorkerConfig
from zmqdata._runtime import auth, reach
from zmqdata._runtime.clock import Backoff
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.pace import HeartbeatPace
from zmqdata._runtime.process import PROCESS_TOKEN
from zmqdata._version import __version__
from zmqdata._wire import messages as m
from zmqdata._wire.deltas import HeartbeatDelta
from zmqdata._wire.tasks import SaveDef, TaskDef
from zmqdata._wire.versions import PeerVersion
from zmqdata._worker.data import DataLoop, Runners
from zmqdata._worker.pipelines import Pipelines
from zmqdata._worker.saver import SaveRunner
from zmqdata._worker.stats import worker_stats
from zmqdata._worker.task import TaskRunner
from zmqdata.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    ZmqDataError,
)

logger = logging.getLogger("zmqdata.worker")

ZSTD_LEVEL = 1
WARN_AFTER_S = 5.0
"""A dispatcher silent this long (or 3 heartbeats) gets a warning, repeated
every ``WARN_EVERY_S`` while it stays silent."""
WARN_EVERY_S = 30.0
STRETCH = 4
"""A quiet worker whose tasks ask for splits skips heartbeats (each split
request shows the dispatcher it lives), yet sends its stats at least every
this many quiet intervals."""


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


class ControlLoop(PollLoop):
    """The worker's link to the dispatcher: one DEALER, one thread.

    Registers (again after the dispatcher forgets it), heartbeats with task
    states and stats, starts the tasks the replies and ``ProcessTask`` pushes
    name, runs the saves the replies list (``saver.py``), and warns while the dispatcher cannot be reached, saying why. It
    speaks the dispatcher's protocol version if that is the older one.
    """

    def __init__(
        self,
        config: WorkerConfig,
        data: DataLoop,
        runners: Runners,
        keys: auth.ClientKeys | None = None,
    ) -> None:
        super().__init__("zmqdata-worker-control")
        self.config = config
        self._keys = keys
        self._data, self._runners = data, runners
        self._pipelines = Pipelines()
        self._deltas = HeartbeatDelta()
        """Heartbeats as deltas against the last one answered (``_wire/deltas.py``)."""
        self._saves: dict[str, SaveRunner] = {}
        """The saves this worker writes chunks of, by id."""
        self._heartbeat_s = config.heartbeat_interval_ms / 1000
        self._pace = HeartbeatPace(self._heartbeat_s)
        """Longer intervals while nothing changes (``_runtime/pace.py``)."""
        self._reported: tuple[Any, ...] = ()
        """The tasks, pipelines and draining the last heartbeat reported."""
        self._quiet: int | None = None
        """The last heartbeat, if it reported nothing new (its request id)."""
        self._last_send = 0.0
        self.tick_s = min(0.1, self._heartbeat_s)
        self.worker_id: int | None = None
        self._request_id = 0
        self._next_send = 0.0
        self._backoff = Backoff(0.05, max(0.05, self._heartbeat_s))
        self._last_reply = time.monotonic()
        self._unanswered_since: float | None = None
        """When the first message the dispatcher has not answered yet went out."""
        self._next_warning = 0.0
        self._handshake_error: str | None = None
        self._dispatcher_version = PeerVersion()
        self._told_version: int | None = None
        self.drain_requested = threading.Event()
        """Set by ``WorkerServer.drain`` (any thread); the loop drains its tasks."""
        self.leave_now = threading.Event()
        """Set when draining took too long: the worker leaves with what it holds."""
        self.left = threading.Event()
        """Set once the dispatcher has taken this worker's leave."""
        self._draining = False
        self._leave_request: int | None = None
        self._tracer = data.tracer
        self._trace_requests: set[int] = set()
        """The ``TraceSpans`` of the last report: their answers change nothing."""
        # What the worker registers as (host:port) and where consumers dial
        # it; set by WorkerServer.start() once the data socket is bound.
        self.worker_address = self.data_address = ""

    def setup(self) -> None:
        self._dealer = self.socket(zmq.DEALER)
        # One routing id for the worker's life: the dispatcher tells workers
        # apart by it, also after a reconnect.
        self._dealer.setsockopt(zmq.ROUTING_ID, f"w-{uuid.uuid4().hex}".encode())
        auth.secure_client(self._dealer, self._keys)
        self._monitor = auth.handshake_monitor(self._dealer)
        self._loop_poller.register(self._monitor, zmq.POLLIN)
        self._dealer.connect(self.config.dispatcher_address)
        self._register()

    def _send(self, message: m.Message) -> None:
        # Never block the loop (and so stop()) on a dispatcher that is gone.
        now = time.monotonic()
        data = self._dispatcher_version.encode(message, now)
        with contextlib.suppress(zmq.Again):
            self._dealer.send(data, zmq.NOBLOCK)
        if self._unanswered_since is None:
            self._unanswered_since = now

    def _register(self) -> None:
        self._request_id += 1
        self._send(
            m.RegisterWorker(
                request_id=self._request_id,
                worker_address=self.worker_address,
                data_address=self.data_address,
                tags=list(self.config.worker_tags),
                version=__version__,
                local_process=PROCESS_TOKEN,
                inproc_address=self._data.inproc_endpoint,
            )
        )
        self._next_send = time.monotonic() + max(self._backoff.next_delay(), 0.05)

    def on_readable(self, sock: Any) -> None:
        if sock is self._monitor:
            self._check_handshake()
            return
        while True:
            try:
                payload = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message, version = m.decode_versioned(payload)
            except ZmqDataError as error:
                logger.warning("bad message from the dispatcher: %s", error)
                continue
            self._last_reply = time.monotonic()
            self._unanswered_since = None
            self._next_warning, self._handshake_error = 0.0, None
            self._take(message, version)

    def _take(self, message: m.Message, version: int) -> None:
        """Handles a message encoded at ``version``.

        What an older dispatcher refused is sent again at its version.
        """
        again = self._dispatcher_version.received(message, version, self._last_reply)
        if again is None:
            self._on_message(message)
            return
        if again and version != self._told_version:  # once, not at each probe
            logger.info("the dispatcher speaks protocol v%d: speaking it", version)
            self._told_version = version
        for refused in again:
            self._send(refused)

    def _on_message(self, message: m.Message) -> None:
        if message.request_id in self._trace_requests:
            if isinstance(message, m.Error):
                logger.info("trace spans refused: %s", message.message)
            return
        if isinstance(message, m.RegisterWorkerReply):
            if self.worker_id is None:
                logger.info(
                    "worker %s registered as %d", self.worker_address, message.worker_id
                )
            self.worker_id = message.worker_id
            self._deltas.reset()
            self._pace.set_ceiling(message.heartbeat_max_ms / 1000 or None)
            self._pace.reset()
            self._backoff.reset()
            self._next_send = time.monotonic() + self._heartbeat_s
            self._start_tasks(message.tasks)
        elif isinstance(message, m.WorkerHeartbeatReply) and not message.request_id:
            self._pace.reset()  # answers nothing: a trace opened; heartbeat now
            self._next_send = time.monotonic()
        elif isinstance(message, m.WorkerHeartbeatReply):
            self._tracer.replied(message.request_id, message.trace)
            # A dispatcher older than deltas reads every heartbeat as complete.
            old = self._dispatcher_version.version < m.ADDED_IN["worker_heartbeat.base"]
            self._deltas.answered(message.request_id, resend=message.resend or old)
            if message.request_id == self._leave_request:
                logger.info("worker %s left the dispatcher", self.worker_address)
                self.left.set()
                return
            self._start_tasks(message.new_tasks)
            for task_id in message.tasks_to_delete:
                self._delete_task(task_id)
            self._run_saves(message.saves)
            news = message.new_tasks or message.tasks_to_delete or message.saves
            quiet = message.request_id == self._quiet and not news and not message.trace
            self._pace.after(changed=not quiet)
            self._next_send = self._last_send + self._pace.interval
        elif isinstance(message, m.ProcessTask):
            self._start_tasks(message.tasks)
        elif isinstance(message, m.Error) and message.code == "NOT_FOUND":
            logger.info(
                "dispatcher forgot this worker (%s); registering again", message.message
            )
            self.worker_id = None
            self._register()
        elif isinstance(message, m.Error):
            logger.warning("dispatcher error: %s: %s", message.code, message.message)

    def on_tick(self, now: float) -> None:
        self._warn_if_silent(now)
        self._report_trace()
        leaving = self._drain(now)
        if now < self._next_send:
            return
        if self.worker_id is None:
            if self._draining:  # never registered, or forgotten: nothing to hand back
                self.left.set()
            else:
                self._register()
            return
        runners = self._runners.snapshot()
        tasks = [[r.task_id, r.drained] for r in runners]
        held = self._pipelines.held()
        reported = (tasks, held, self._draining)
        if reported == self._reported and self._alive_by_splits(now, runners):
            return
        self._request_id += 1
        base, stats, pipelines = self._deltas.outgoing(
            worker_stats(self._data, self._runners, runners), held
        )
        heartbeat = m.WorkerHeartbeat(
            request_id=self._request_id,
            worker_id=self.worker_id,
            tasks=tasks,
            stats=stats,
            draining=self._draining,
            leaving=leaving,
            pipelines=pipelines,
            base=base,
        )
        self._deltas.sent(self._request_id)
        self._tracer.sent(self._request_id)  # its reply's clock: the trace's
        self._send(heartbeat)
        if leaving:
            self._leave_request = self._request_id
        self._quiet = self._request_id if reported == self._reported else None
        if self._quiet is None:
            self._pace.reset()
        self._reported, self._last_send = reported, now
        self._next_send = now + self._pace.interval

    def _alive_by_splits(self, now: float, runners: list[TaskRunner]) -> bool:
        """Whether a quiet heartbeat may wait (then pushes it back).

        It may when a task asked for splits within the interval, which showed
        the dispatcher this worker lives (protocol 6 on), for ``STRETCH``
        intervals at most.
        """
        if (
            self._quiet is None
            or self._dispatcher_version.version
            < m.ADDED_IN["get_split_reply.period_ms"]
        ):
            return False
        asked = max(
            (r.splits.asked_at for r in runners if r.splits is not None),
            default=float("-inf"),
        )
        due = stretched_due(self._pace, self._last_send, asked)
        if due is None or due <= now:
            return False
        self._next_send = due
        return True

    def _report_trace(self) -> None:
        """Sends the spans of a trace window once it is over."""
        if not self._tracer.due():
            return
        log = self._tracer.finish()
        if log is None or self.worker_id is None:
            return
        self._trace_requests = self._tracer.send_report(
            log, self._next_id, self._send, worker_id=self.worker_id
        )

    def _next_id(self) -> int:
        self._request_id += 1
        return self._request_id

    def _drain(self, now: float) -> bool:
        """Drains once asked to; True when a heartbeat should say it leaves now.

        Draining: the tasks stop producing (``TaskRunner.drain``) and the
        dispatcher, told at once, gives this worker no new task. Once every
        task is settled (its buffer read) the worker leaves.
        """
        if not self.drain_requested.is_set():
            return False
        if self._silent_s(now) > max(1.0, 3 * self._pace.max_s):
            self.left.set()  # no dispatcher to tell: nothing to hand back
            return False
        if not self._draining:
            self._draining = True
            logger.info("worker %s draining", self.worker_address)
            for runner in self._runners.snapshot():
                runner.drain()
            self._stop_saves()
            self._next_send = now  # tell the dispatcher now
        settled = all(r.settled for r in self._runners.snapshot())
        if (settled or self.leave_now.is_set()) and self._leave_request is None:
            self._next_send = now
            return True
        return False

    def _check_handshake(self) -> None:
        try:
            auth.check_handshake(self._monitor, self.config.dispatcher_address)
        except PermissionDeniedError as error:
            self._handshake_error = error.message

    def _silent_s(self, now: float) -> float:
        """How long the dispatcher has left a message unanswered."""
        since = self._unanswered_since
        return 0.0 if since is None else now - since

    def _warn_if_silent(self, now: float) -> None:
        silent_s = self._silent_s(now)
        if (
            silent_s < max(WARN_AFTER_S, 3 * self._pace.max_s)
            or now < self._next_warning
        ):
            return
        self._next_warning = now + WARN_EVERY_S
        address = self.config.dispatcher_address
        logger.warning(
            "no answer from the dispatcher at %s for %.0f s: %s",
            address,
            silent_s,
            self._handshake_error or reach.diagnose(address, timeout_s=0.5),
        )

    def _start_tasks(self, tasks: list[dict[str, Any]]) -> None:
        if self._draining:
            return  # a leaving worker starts nothing
        for wire in tasks:
            try:
                task = TaskDef.from_wire(wire)
            except InvalidArgumentError as error:
                logger.warning("bad task from the dispatcher: %s", error)
                continue
            if self._runners.get(task.task_id) is not None:
                continue
            pipeline = self._pipelines.resolve(task)
            if pipeline is None:  # dropped since the heartbeat that said it was held
                logger.debug("task %d waits for its pipeline", task.task_id)
                continue
            over_tcp = self._data.endpoint.startswith("tcp://")
            level = ZSTD_LEVEL if task.compression == "AUTO" and over_tcp else None
            runner = TaskRunner(
                task,
                pipeline,
                self.config.dispatcher_address,
                level,
                self.config.dispatcher_timeout_ms / 1000,
                self._data.waker.wake,
                self.config.cross_trainer_cache_size_bytes,
                self._keys,
                same_host=self._data.same_host_readers,
            )
            runner.thread_limit = self.config.threads
            runner.tracer = self._tracer
            self._runners.add(runner)
            runner.start()
            logger.debug("task %d started", runner.task_id)

    def _delete_task(self, task_id: int) -> None:
        runner = self._runners.pop(task_id)
        if runner is not None:
            runner.stop()
            logger.debug("task %d deleted", task_id)

    def _run_saves(self, saves: list[dict[str, Any]]) -> None:
        """Runs a ``SaveRunner`` per save listed; stops those no longer listed.

        A runner started under a worker id this worker no longer has (it
        registered again) starts anew; a draining worker starts none.
        """
        listed: dict[str, SaveDef] = {}
        for wire in saves:
            try:
                save = SaveDef.from_wire(wire)
            except InvalidArgumentError as error:
                logger.warning("bad save from the dispatcher: %s", error)
                continue
            listed[save.save_id] = save
        self._stop_saves(
            [
                save_id
                for save_id, runner in self._saves.items()
                if save_id not in listed or runner.worker_id != self.worker_id
            ]
        )
        if self._draining or self.worker_id is None:
            return
        for save in listed.values():
            if save.save_id in self._saves:
                continue
            pipeline = self._pipelines.resolve(save)
            if pipeline is None:  # dropped since the heartbeat that said it was held
                logger.debug("save %s waits for its pipeline", save.save_id)
                continue
            runner = SaveRunner(
                save,
                pipeline,
                self.worker_id,
                self.config.dispatcher_address,
                self.config.dispatcher_timeout_ms / 1000,
                self._keys,
            )
            runner.thread_limit = self.config.threads
            self._saves[save.save_id] = runner
            runner.start()
            logger.debug("save %s started", save.save_id)

    def _stop_saves(self, save_ids: list[str] | None = None) -> None:
        """Stops the runners of ``save_ids`` (None: all)."""
        for save_id in list(self._saves) if save_ids is None else save_ids:
            self._saves.pop(save_id).stop()

    def teardown(self) -> None:
        auth.close_monitor(self._dealer, self._monitor)
        for runner in self._runners.snapshot():
            self._runners.pop(runner.task_id)
            runner.stop()
        self._stop_saves()
