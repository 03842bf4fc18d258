"""The worker's data loop: a ROUTER serving ``GetElements`` from task outputs.

A request asks for up to ``max_elements`` of one task (the consumer's free
credit). It is answered at once with what the buffer holds (small elements
coalesced into one frames message, large ones as their pre-encoded frames), or
parked until the producer adds something: a long poll, so a consumer never
polls blindly and the first element goes out as soon as it exists. A peer may
park only a few requests per task, and parked requests are served round-robin
across peers (``parked.py``). What to send is the task's output's to decide
(``outputs.py``, one per read mode); the loop keeps what is about sockets:
parked requests, the rounds asked for, frames and replies. Each reply is
encoded at the protocol version of its peer's requests (``versions.Spoken``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import zmq

from zmqdata._dataset.block import Block
from zmqdata._runtime import auth
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.metrics import ServeStats
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata._runtime.spans import Tracer
from zmqdata._runtime.waker import Waker
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata._wire.versions import Spoken
from zmqdata._worker import buffer
from zmqdata._worker.buffer import Item, Raw
from zmqdata._worker.linkrate import PeerLinks
from zmqdata._worker.outputs import RoundsOutput
from zmqdata._worker.parked import ParkedRequests
from zmqdata._worker.rounds import RoundRequest, RoundRobin
from zmqdata._worker.serving import Refuse
from zmqdata._worker.shared import SharedServing
from zmqdata._worker.task import TaskRunner
from zmqdata.errors import ZmqDataError

logger = logging.getLogger("zmqdata.worker")

MAX_BATCH = 1000
Request = tuple[zmq.Socket[Any], bytes, m.GetElements]


class Runners:
    """The worker's task runners by id, shared by the control and data loops."""

    def __init__(self) -> None:
        self._runners: dict[int, TaskRunner] = {}
        self._lock = threading.Lock()
        self.removed_finished = 0
        """Tasks whose producer had finished when they were deleted (for stats)."""

    def get(self, task_id: int) -> TaskRunner | None:
        with self._lock:
            return self._runners.get(task_id)

    def add(self, runner: TaskRunner) -> None:
        with self._lock:
            self._runners[runner.task_id] = runner

    def pop(self, task_id: int) -> TaskRunner | None:
        with self._lock:
            runner = self._runners.pop(task_id, None)
            if runner is not None and runner.ended:
                self.removed_finished += 1
            return runner

    def snapshot(self) -> list[TaskRunner]:
        with self._lock:
            return list(self._runners.values())


class DataLoop(PollLoop):
    """The worker's data thread: its ROUTER sockets (endpoint + inproc).

    Answers ``GetElements`` at once from a task's output, or parks the request
    (a long poll, a few per peer) until the producer wakes the loop; what to
    send is decided by the output's pure ``answer``.
    """

    def __init__(
        self,
        protocol: str,
        host: str,
        port: int,
        runners: Runners,
        waker: Waker,
        keys: auth.ServerKeys | None = None,
    ) -> None:
        super().__init__("zmqdata-worker-data")
        self._keys = keys
        self._endpoint_args = (protocol, host, port)
        self._runners, self.waker = runners, waker
        self._parked: ParkedRequests[Request] = ParkedRequests()
        self._rounds: dict[int, tuple[RoundRobin, RoundsOutput]] = {}
        self._bad_input = RateLimitedLog(logger)
        self._shared = SharedServing()
        self.endpoint = self.inproc_endpoint = ""
        self.address = ""
        """The data address the worker advertises: its errors name it."""
        self.stats = ServeStats()
        """Everything this loop served (written on the loop thread only)."""
        self._links = PeerLinks()
        self._spoken: Spoken[bytes] = Spoken()
        self.tracer = Tracer()
        """The worker's tracer: its control loop opens windows, all its threads record."""

    @property
    def same_host_readers(self) -> bool:
        """Whether the last reader could read shared memory (new tasks start so)."""
        return self._shared.last_same_host

    def setup(self) -> None:
        primary = self.socket(zmq.ROUTER)
        auth.secure_server(primary, self._keys)
        auth.acquire(self._keys)
        try:
            self.endpoint = self.bind(primary, *self._endpoint_args)
            if self.endpoint.startswith("inproc://"):
                self.inproc_endpoint = self.endpoint
            else:
                local = self.socket(zmq.ROUTER)
                auth.secure_server(local, self._keys)
                self.inproc_endpoint = self.bind(
                    local, "inproc", f"zmqdata-data-{id(self)}", 0
                )
        except BaseException:
            auth.release(self._keys)
            raise
        self.watch(self.waker.fileno())

    def teardown(self) -> None:
        auth.release(self._keys)
        self._shared.close()

    def on_readable(self, sock: Any) -> None:
        if isinstance(sock, int):
            for task_id in self.waker.drain():
                self._serve_parked(task_id)
                self._release_rounds(task_id)
            return
        for _ in range(MAX_BATCH):
            try:
                received, user, fd = auth.recv_with_fd(sock, self._keys is not None)
            except zmq.Again:
                return
            self._links.heard(received[0], fd)
            self._on_request(sock, received, user)

    def on_tick(self, now: float) -> None:
        self._shared.expire(now, {r.task_id for r in self._runners.snapshot()})
        for task_id in self._parked.task_ids():
            self._serve_parked(task_id)
        for task_id in list(self._rounds):
            self._release_rounds(task_id)
        self._links.prune()

    def _on_request(
        self, sock: zmq.Socket[Any], received: list[bytes], user: str | None
    ) -> None:
        """Serves or parks one request from the CURVE key ``user`` (None: plain)."""
        if len(received) != 2:
            self._bad_input.warning("dropped a %d-frame message", len(received))
            return
        peer, payload = received
        try:
            request, version = m.decode_versioned(payload)
        except ZmqDataError as error:
            self.stats.failed()
            self._bad_input.warning("bad request: %s", error.message)
            refusal = m.Error(code=error.code, message=error.message)
            sock.send_multipart([peer, self._encode(peer, refusal)])
            return
        self._spoken.heard(peer, version)
        if isinstance(request, m.GetElements) and not auth.may_read(
            self._keys, user, request.task_id, request.ticket
        ):
            text = (
                f"public key {user} was not given task {request.task_id} by the "
                "dispatcher (no valid read ticket)"
            )
            self._bad_input.warning("refused a read: %s", text)
            self._reply_error((sock, peer, request), "PERMISSION_DENIED", text)
            return
        if not isinstance(request, m.GetElements) or request.max_elements < 1:
            error_reply = m.Error(
                request_id=request.request_id,
                code="INVALID_ARGUMENT",
                message=f"the data socket serves get_elements with max_elements >= 1, "
                f"got {request!r:.200}",
            )
            self.stats.failed()
            sock.send_multipart([peer, self._encode(peer, error_reply)])
            return
        runner = self._runners.get(request.task_id)
        self._shared.note(None if runner is None else runner.share, request)
        if request.rounds:
            self._add_round_request((sock, peer, request))
        elif not self._serve_in_turn((sock, peer, request)):
            self._park((sock, peer, request))

    def _serve_in_turn(self, request: Request) -> bool:
        """Serves now, unless first-come readers of the task are already waiting."""
        task_id = request[2].task_id
        runner = self._runners.get(task_id)
        in_turn = runner is None or not runner.output.any_order
        if in_turn and self._parked.waiting(task_id):
            return False
        return self._serve(request)

    def _park(self, request: Request) -> None:
        """Parks a request, or refuses it if its peer has its fill parked."""
        sock, peer, message = request
        if not self._parked.park(message.task_id, (sock, peer), request):
            text = (
                f"this peer already has {self._parked.max_per_peer} requests "
                f"waiting for task {message.task_id}; wait for their replies"
            )
            self._reply_error(request, "FAILED_PRECONDITION", text)

    # ------------------------------------------------------------ coordinated reads

    def _add_round_request(self, request: Request) -> None:
        message = request[2]
        runner = self._runners.get(message.task_id)
        if runner is None:
            self._reply_absent(request)
            return
        output = runner.output
        if not isinstance(output, RoundsOutput) or message.consumer_index is None:
            text = f"task {message.task_id} is not a coordinated-read task"
            self._reply_error(request, "INVALID_ARGUMENT", text)
            return
        rounds, _ = self._rounds.setdefault(
            message.task_id, (RoundRobin(output.num_consumers), output)
        )
        wanted = RoundRequest(request, list(message.rounds))
        refused = rounds.add(wanted, message.consumer_index)
        if refused is not None:
            self._reply_error(request, "FAILED_PRECONDITION", refused)
            return
        self._release_rounds(message.task_id)

    def _release_rounds(self, task_id: int) -> None:
        """Sends every round all consumers asked for, while elements last."""
        entry, runner = self._rounds.get(task_id), self._runners.get(task_id)
        if entry is None:
            return
        rounds, output = entry
        if runner is None:
            self._rounds.pop(task_id)
            for waiting in rounds.pop_all():
                text = f"task {task_id} was deleted"
                self._reply_error(waiting.request, m.ABSENT, text)
            return
        for round_ in rounds.ready():
            items = output.take_round()
            if items is None:
                return
            if isinstance(items, Refuse):  # a partial round can never fill up
                self._rounds.pop(task_id)
                for waiting in rounds.pop_all():
                    self._reply_error(waiting.request, items.code, items.text)
                return
            for done in rounds.hand_out(round_, items):
                told = {"rounds": done.rounds}
                self._send_items(done.request, done.elements(), False, runner, told)

    # ------------------------------------------------------------ first come, first served

    def _serve_parked(self, task_id: int) -> None:
        runner = self._runners.get(task_id)
        any_order = runner is not None and runner.output.any_order
        self._parked.serve(task_id, self._serve, any_order=any_order)

    def _serve(self, request: Request) -> bool:
        """Answers ``request`` if there is anything to say; False to park it."""
        runner = self._runners.get(request[2].task_id)
        if runner is None:
            self._reply_absent(request)
            return True
        decision = runner.output.answer(request[2])
        if isinstance(decision, Refuse):
            self._reply_error(request, decision.code, decision.text)
        elif decision is not None:
            eos = decision.end_of_sequence
            self._send_items(request, decision.items, eos, runner, decision.told())
        return decision is not None

    def _send_items(
        self,
        request: Request,
        items: Sequence[Item],
        eos: bool,
        runner: TaskRunner,
        told: dict[str, Any],
    ) -> None:
        """Sends ``items`` with a header that says ``told`` too (``_header``)."""
        log = self.tracer.log  # a trace window: each reply is a "send" span
        start = time.perf_counter_ns()
        sock, peer, message = request
        try:
            groups = self._frame_groups(items, message)
        except ZmqDataError as error:
            self._reply_error(
                request, error.code, f"cannot send an element: {error.message}"
            )
            return
        count = buffer.count(items)
        header = _header(message, count, eos, groups, told)
        parts = [peer, self._encode(peer, header)]
        nbytes = 0
        for group in groups:
            parts.extend(group)
            for part in group:
                nbytes += part.nbytes if isinstance(part, memoryview) else len(part)
        # One count per reply (not per element): the hot path stays an int add.
        self.stats.served(count, nbytes)
        runner.stats.served(count, nbytes)
        sock.send_multipart(parts, copy=False)
        runner.compression.link(peer, self._links.rate(peer))
        if log is not None:
            sent = {"task_id": runner.task_id, "elements": count, "bytes": nbytes}
            log.add("send", "worker", start, time.perf_counter_ns(), sent)

    def _frame_groups(
        self, items: Sequence[Item], message: m.GetElements
    ) -> list[list[Any]]:
        """A reply's frames-codec messages: runs of small items coalesced into one.

        A block is one message of its own, columnar (rows where its arrays
        are large).
        """
        groups: list[list[Any]] = []
        raw: list[Any] = []
        for item in items:
            if isinstance(item, Raw):
                raw.append(item.element)
                continue
            if isinstance(item, Block):
                group = frames.encode_block(item.first, item.columns, item.n)
                if group is None:
                    raw.extend(item.rows())
                    continue
            else:
                group = self._shared.frames_for(item, message)
            if raw:
                groups.append(frames.encode(raw))
                raw = []
            groups.append(group)
        if raw:
            groups.append(frames.encode(raw))
        return groups

    def _reply_absent(self, request: Request) -> None:
        """The task is not on this worker (not yet, or no more): ask again later."""
        text = f"task {request[2].task_id} is not on this worker"
        self._reply_error(request, m.ABSENT, text)

    def _reply_error(self, request: Request, code: str, text: str) -> None:
        sock, peer, message = request
        if code != m.ABSENT:
            text = f"worker {self.address} (task {message.task_id}): {text}"
        error = m.Error(request_id=message.request_id, code=code, message=text)
        if code == m.ABSENT:
            self.stats.missed()
        else:
            self.stats.failed()
            runner = self._runners.get(message.task_id)
            if runner is not None:
                runner.stats.failed()
        sock.send_multipart([peer, self._encode(peer, error)])

    def _encode(self, peer: bytes, message: m.Message) -> bytes:
        """``message`` at the protocol version ``peer`` speaks."""
        return m.encode(message, self._spoken.of(peer))


def _header(
    message: m.GetElements,
    count: int,
    eos: bool,
    groups: list[list[Any]],
    told: dict[str, Any],
) -> m.Elements:
    """The header of the reply to ``message``: what its ``groups`` of frames hold.

    ``told``: what the answer says besides (its rounds, coverage or split).
    """
    return m.Elements(
        request_id=message.request_id,
        task_id=message.task_id,
        count=count,
        end_of_sequence=eos,
        parts=[len(group) for group in groups],
        **told,
    )
