"""The worker's control loop: its one DEALER to the dispatcher, one thread.

The shell around ``control_core.WorkerControl``, which decides: this loop
feeds it the dispatcher's messages and its ticks with what it owns (the task
runners, pipelines, drain requests), and carries out what it returns:
sends, starts and deletes the tasks the replies name, runs the saves they
list (``saver.py``), drains, and warns while the dispatcher cannot be reached.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import zmq

from zmqdata._config import WorkerConfig
from zmqdata._runtime import auth, reach
from zmqdata._runtime.instruction import Instruction
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.process import PROCESS_TOKEN
from zmqdata._version import PROTOCOL_VERSION, __version__
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import SaveDef, TaskDef
from zmqdata._worker.control_core import (
    DeleteTask,
    Drain,
    Left,
    RunSaves,
    Send,
    StartTasks,
    TraceReplied,
    TraceSent,
    WorkerControl,
    WorkerView,
)
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
T = TypeVar("T")

ZSTD_LEVEL = 1
WARN_AFTER_S = 5.0
"""A dispatcher silent this long (or 3 heartbeats) gets a warning, repeated
every ``WARN_EVERY_S`` while it stays silent."""
WARN_EVERY_S = 30.0


class ControlLoop(PollLoop):
    """The worker's link to the dispatcher: one DEALER, one thread.

    Around a ``WorkerControl`` (``core``) that decides when to register and
    heartbeat and what the replies ask for, this loop starts the tasks they
    and ``ProcessTask`` pushes name, runs the saves they list
    (``saver.py``), and warns while the dispatcher cannot be reached, saying
    why. It speaks the dispatcher's protocol version if that is the older one.
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
        self._saves: dict[str, SaveRunner] = {}
        """The saves this worker writes chunks of, by id."""
        heartbeat_s = config.heartbeat_interval_ms / 1000
        self.core = WorkerControl(heartbeat_s, self._view)
        """What the loop does, decided (``control_core.py``)."""
        self.tick_s = min(0.1, heartbeat_s)
        self._last_reply = time.monotonic()
        self._next_warning = 0.0
        self._handshake_error: str | None = None
        self.drain_requested = threading.Event()
        """Set by ``WorkerServer.drain`` (any thread); the loop drains its tasks."""
        self.leave_now = threading.Event()
        """Set when draining took too long: the worker leaves with what it holds."""
        self.left = threading.Event()
        """Set once the dispatcher has taken this worker's leave."""
        self.registered = threading.Event()
        """Set once the dispatcher has first registered this worker."""
        self._tracer = data.tracer
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
        self.core.registration = m.RegisterWorker(
            worker_address=self.worker_address,
            data_address=self.data_address,
            tags=list(self.config.worker_tags),
            version=__version__,
            local_process=PROCESS_TOKEN,
            inproc_address=self._data.inproc_endpoint,
        )
        now = time.monotonic()
        self._execute(self.core.register(now), now)

    def _send(self, message: m.Message, now: float) -> None:
        # Never block the loop (and so stop()) on a dispatcher that is gone.
        data = self.core.encode(message, now)
        with contextlib.suppress(zmq.Again):
            self._dealer.send(data, zmq.NOBLOCK)

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
            self._next_warning, self._handshake_error = 0.0, None
            self._take(message, version, self._last_reply)

    def _take(
        self,
        message: m.Message,
        version: int = PROTOCOL_VERSION,
        now: float | None = None,
    ) -> None:
        """Carries out what the core makes of a message encoded at ``version``."""
        now = time.monotonic() if now is None else now
        self._execute(self.core.handle(message, now, version), now)
        if self.core.worker_id is not None and not self.registered.is_set():
            self.registered.set()

    def on_tick(self, now: float) -> None:
        self._warn_if_silent(now)
        self._report_trace(now)
        self._execute(self.core.tick(now), now)

    def _view(self) -> WorkerView:
        """What the core decides on at a tick: the tasks, pipelines and drain requests."""
        runners = self._runners.snapshot()
        drain = self.drain_requested.is_set()
        return WorkerView(
            tasks=[[r.task_id, r.drained] for r in runners],
            held=self._pipelines.held,
            stats=lambda: worker_stats(self._data, self._runners, runners),
            asked_at=max(
                (r.splits.asked_at for r in runners if r.splits is not None),
                default=float("-inf"),
            ),
            settled=drain and all(r.settled for r in runners),
            drain_requested=drain,
            leave_now=self.leave_now.is_set(),
        )

    def _execute(self, instructions: list[Instruction], now: float) -> None:
        """Carries out the core's instructions, in order."""
        for instruction in instructions:
            self._do(instruction, now)

    def _do(self, instruction: Instruction, now: float) -> None:
        """Carries out one instruction of the core."""
        match instruction:
            case Send():
                self._send(instruction.message, now)
            case StartTasks():
                self._start_tasks(instruction.tasks)
            case DeleteTask():
                self._delete_task(instruction.task_id)
            case RunSaves():
                self._run_saves(instruction)
            case Drain():
                for runner in self._runners.snapshot():
                    runner.drain()
                self._stop_saves()
            case TraceSent():
                self._tracer.sent(instruction.request_id)
            case TraceReplied():
                self._tracer.replied(instruction.request_id, instruction.trace)
            case Left():
                self.left.set()

    def _report_trace(self, now: float) -> None:
        """Sends the spans of a trace window once it is over."""
        if not self._tracer.due():
            return
        log = self._tracer.finish()
        worker_id = self.core.worker_id
        if log is None or worker_id is None:
            return
        self.core.trace_requests = self._tracer.send_report(
            log,
            self.core.next_id,
            lambda message: self._send(message, now),
            worker_id=worker_id,
        )

    def _check_handshake(self) -> None:
        try:
            auth.check_handshake(self._monitor, self.config.dispatcher_address)
        except PermissionDeniedError as error:
            self._handshake_error = error.message

    def _warn_if_silent(self, now: float) -> None:
        silent_s = self.core.silent_s(now)
        if (
            silent_s < max(WARN_AFTER_S, 3 * self.core.pace.max_s)
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
        """Starts a runner per task not running yet whose pipeline is held."""
        for task in _parsed(tasks, TaskDef.from_wire, "task"):
            if self._runners.get(task.task_id) is None:
                self._start_task(task)

    def _start_task(self, task: TaskDef) -> None:
        """Starts ``task``'s runner, unless its pipeline is no longer held."""
        pipeline = self._pipelines.resolve(task)
        if pipeline is None:  # dropped since the heartbeat that said it was held
            logger.debug("task %d waits for its pipeline", task.task_id)
            return
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

    def _run_saves(self, run: RunSaves) -> None:
        """Runs a ``SaveRunner`` per save listed; stops those no longer listed.

        A runner started under a worker id this worker no longer has (it
        registered again) starts anew; none starts unless ``run.start``.
        """
        listed = _saves_listed(run.saves)
        self._stop_saves(
            [
                save_id
                for save_id, runner in self._saves.items()
                if save_id not in listed or runner.worker_id != run.worker_id
            ]
        )
        if not run.start or run.worker_id is None:
            return
        for save in listed.values():
            if save.save_id not in self._saves:
                self._start_save(save, run.worker_id)

    def _start_save(self, save: SaveDef, worker_id: int) -> None:
        """Starts ``save``'s runner, unless its pipeline is no longer held."""
        pipeline = self._pipelines.resolve(save)
        if pipeline is None:  # dropped since the heartbeat that said it was held
            logger.debug("save %s waits for its pipeline", save.save_id)
            return
        runner = SaveRunner(
            save,
            pipeline,
            worker_id,
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


def _saves_listed(saves: list[dict[str, Any]]) -> dict[str, SaveDef]:
    """The saves of a heartbeat reply by id; one that is malformed is logged."""
    return {save.save_id: save for save in _parsed(saves, SaveDef.from_wire, "save")}


def _parsed(
    wires: list[dict[str, Any]], from_wire: Callable[[dict[str, Any]], T], what: str
) -> list[T]:
    """``from_wire`` of each map; one that is malformed is logged and left out."""
    parsed = []
    for wire in wires:
        try:
            parsed.append(from_wire(wire))
        except InvalidArgumentError as error:
            logger.warning("bad %s from the dispatcher: %s", what, error)
    return parsed
