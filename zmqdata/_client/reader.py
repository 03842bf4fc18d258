"""Reading a job: ``DistributedIterator`` (trainer side) and its fetcher thread.

The fetcher owns every client socket: a DEALER to the dispatcher (heartbeats
that carry task lists and end-of-input) and one DEALER per worker data
endpoint, each with a monitor of its connection (``links.Links``). It feeds
what arrives to a ``core.ReadCore`` as events (``instructions``), which decides
what to ask for (first come with ``credit.CreditPlan``, coordinated rounds with
``rounds.RoundPlan``, dealt turns with ``dealing.DealPlan``), and carries out
the instructions it returns: sends, and decoded batches handed to the trainer
through a queue. Replies on one
connection keep their order, so one worker's order is kept. Each peer is
spoken the protocol version it speaks (``versions.PeerVersion``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import queue
import sys
import time
import weakref
from collections import deque
from typing import Any

import zmq

from zmqdata._client import dealing, rpc
from zmqdata._client.core import END, Counters, Failure, Plan, ReadCore
from zmqdata._client.credit import CreditPlan
from zmqdata._client.dealing import DealPlan
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
    Instruction,
    LinksLost,
    Started,
    ToDispatcher,
    ToWorker,
    Unsent,
    received,
)
from zmqdata._client.links import Links
from zmqdata._client.options import ReadOptions, Timeouts
from zmqdata._client.position import Progress
from zmqdata._client.rounds import RoundPlan
from zmqdata._client.segments import Claims
from zmqdata._client.settings import ClientSettings
from zmqdata._dataset.iterator import DatasetIterator
from zmqdata._runtime import auth, clock, shm
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.process import PROCESS_TOKEN
from zmqdata._runtime.spans import Tracer
from zmqdata._runtime.waker import Waker
from zmqdata._wire import messages as m
from zmqdata._wire.versions import PeerVersion
from zmqdata.errors import (
    PermissionDeniedError,
    UnavailableError,
    ZmqDataError,
)

logger = logging.getLogger("zmqdata.client")

_QUEUE_POLL_S = 0.1


def open_job(options: ReadOptions, settings: ClientSettings) -> int:
    """The job ``options`` read (a named one is shared), created if need be."""
    reply = rpc.call(
        options.service,
        m.GetOrCreateJob(
            dataset_id=options.dataset_id,
            processing_mode=options.processing_mode,
            job_name=options.job_name,
            num_consumers=options.num_consumers,
            target_workers=options.target_workers,
            cross_trainer_cache=options.trainer_id is not None,
            local_process=PROCESS_TOKEN,
            exactly_once=options.exactly_once,
            seed=options.seed,
        ),
        m.GetOrCreateJobReply,
        settings.dispatcher_timeout_s,
    )
    return reply.job_id


def plan_for(options: ReadOptions, counters: Counters, state: m.IterationState) -> Plan:
    """How to read: dealt turns (multi-rank reads), coordinated rounds, or first come."""
    if state.deal:
        return DealPlan(options)
    if options.num_consumers is None:
        return CreditPlan(options, counters)
    return RoundPlan(options)


class Fetcher(PollLoop):
    """The reader's thread: owns every socket of one read, feeding a ``ReadCore``.

    One DEALER to the dispatcher and one per worker data endpoint, each with a
    monitor (``Links``) that says whether it is connected. Socket events and
    ticks become events for the pure ``ReadCore`` (credit, retries, timeouts,
    end of input), whose instructions it carries out: requests to workers,
    heartbeats, decoded batches to the trainer through a queue.
    """

    def __init__(
        self,
        options: ReadOptions,
        settings: ClientSettings,
        state: m.IterationState,
        out: queue.SimpleQueue[Any],
        counters: Counters,
    ) -> None:
        super().__init__("zmqdata-reader")
        self._service = options.service
        self._keys = settings.keys()
        self._out = out
        self._sockets_by_endpoint: dict[str, zmq.Socket[Any]] = {}
        self._versions: dict[str, PeerVersion] = {}
        """By endpoint (the dispatcher's too), the protocol version to speak."""
        # Connection state of every socket: a refused CURVE handshake fails the
        # read; a worker unreachable for worker_timeout_s fails it too.
        self._links = Links(settings.worker_timeout_s)
        timeouts = Timeouts(
            settings.heartbeat_s,
            settings.dispatcher_timeout_s,
            settings.worker_timeout_s,
        )
        self._core = ReadCore(
            options,
            timeouts,
            state.client_id,
            counters,
            plan_for(options, counters, state),
            self._links,
            clock.now(),
        )
        self._initial = state
        # Same host: requests name this process's presence file in /dev/shm,
        # and workers that can open it answer with shared memory.
        self._probe = shm.presence() if shm.enabled() else ""
        if self._probe:
            shm.sweep()
        self._claims = Claims()
        self._segments = self._claims.claim if self._probe else None
        """How replies' shared memory is mapped (None: none is asked for)."""
        self.waker = Waker()
        self.tracer = Tracer()
        """The read's spans (``traces.share_traces``): the trainer's waits and steps."""
        self._trace_requests: set[int] = set()
        """The ``TraceSpans`` of the last report: their answers change nothing."""
        self.tick_s = min(0.05, settings.heartbeat_s)
        if state.deal:  # elements may wait on a split's holder: learn it soon
            self.tick_s = min(self.tick_s, dealing.RETRY_S)

    # ------------------------------------------------------------ instructions

    def _handle(self, event: Event, now: float) -> None:
        """Feeds ``event`` to the core; carries out what it answers."""
        self._carry_out(self._core.handle(event, now))

    def _carry_out(self, instructions: list[Instruction]) -> None:
        """Carries out the core's instructions, in order.

        A request that could not be queued goes back to the core (``Unsent``).
        """
        for instruction in instructions:
            match instruction:
                case ToWorker():
                    if not self._to_worker(instruction.endpoint, instruction.request):
                        self._handle(Unsent(instruction.request), clock.now())
                case ToDispatcher():
                    self.to_dispatcher(instruction.message)
                case Dropped():
                    logger.info(
                        "dropped %d elements of lost tasks received after a silence",
                        instruction.elements,
                    )
                case Deliver():
                    self._out.put(instruction.batch)
                case End():
                    self._out.put(END)
                case Fail():
                    self._out.put(Failure(instruction.error))

    def _to_worker(self, endpoint: str, request: m.GetElements) -> bool:
        """Sends ``request`` without blocking; False when it could not be queued."""
        if self._probe and not endpoint.startswith("inproc://"):
            request = dataclasses.replace(
                request, shm_probe=self._probe, shm_done=self._claims.take(endpoint)
            )
        try:
            self._send(endpoint, request)
        except zmq.Again:
            return False
        return True

    def to_dispatcher(self, message: m.Message) -> None:
        """Sends without blocking: a dispatcher gone is noticed by its silence."""
        if isinstance(message, m.ClientHeartbeat):
            self.tracer.sent(message.request_id)  # its reply's clock: the trace's
        with contextlib.suppress(zmq.Again):
            self._send(self._service, message)

    def _send(self, endpoint: str, message: m.Message) -> None:
        """Sends at the version ``endpoint`` speaks; raises ``zmq.Again`` if full."""
        if endpoint == self._service:
            sock = self._dispatcher
        else:
            sock = self._socket_for(endpoint)
        sock.send(self._version_of(endpoint).encode(message, clock.now()), zmq.NOBLOCK)

    def _version_of(self, endpoint: str) -> PeerVersion:
        version = self._versions.get(endpoint)
        if version is None:
            version = self._versions[endpoint] = PeerVersion()
        return version

    # ------------------------------------------------------------ loop hooks

    def setup(self) -> None:
        self._dispatcher = self.socket(zmq.DEALER)
        self._connect(self._dispatcher, self._service)
        self.watch(self.waker.fileno())
        self._handle(Started(self._initial), clock.now())
        self._close_unused_sockets()
        self._handle(Drained(), clock.now())

    def on_readable(self, sock: Any) -> None:
        now = clock.now()
        if isinstance(sock, int):
            self.waker.drain()
        elif sock in self._links:
            try:
                lost = self._links.read(sock, now)
            except PermissionDeniedError as error:
                self._handle(Broken(error), now)
                return
            self._handle(LinksLost(lost), now)
        elif sock is self._dispatcher:
            self._drain(sock, self._service, self._on_dispatcher)
            self._close_unused_sockets()
        else:
            self._claims.endpoint = self._endpoint_of(sock)
            self._drain(sock, self._claims.endpoint, self._on_worker)
        self._handle(Drained(), clock.now())

    def on_tick(self, now: float) -> None:
        if self.tracer.due():
            self._report_trace()
        self._carry_out(self._core.tick(now))
        self._claims.trim(now)

    def teardown(self) -> None:
        self._dispatcher.setsockopt(zmq.LINGER, 100)  # let the release go out
        self._report_trace()  # a read ending in a window: what it recorded
        for release in self._core.handle(Closing(), clock.now()):
            if isinstance(release, ToDispatcher):  # nothing goes to the trainer now
                self.to_dispatcher(release.message)
        self.waker.close()
        self._links.close()
        self._claims.close()
        if self._probe:
            shm.sweep()

    def _connect(self, sock: zmq.Socket[Any], endpoint: str) -> None:
        auth.secure_client(sock, self._keys)
        monitor = self._links.watch(sock, endpoint, clock.now())
        self._loop_poller.register(monitor, zmq.POLLIN)
        sock.connect(endpoint)

    def _socket_for(self, endpoint: str) -> zmq.Socket[Any]:
        sock = self._sockets_by_endpoint.get(endpoint)
        if sock is None:
            sock = self.socket(zmq.DEALER)
            self._connect(sock, endpoint)
            self._sockets_by_endpoint[endpoint] = sock
        return sock

    def _endpoint_of(self, sock: zmq.Socket[Any]) -> str:
        for endpoint, known in self._sockets_by_endpoint.items():
            if known is sock:
                return endpoint
        return ""

    def _close_unused_sockets(self) -> None:
        """Closes the sockets of workers no task is read from any more.

        Workers come and go (restarts, autoscaling): a long read must not keep
        a socket, and its reconnect attempts, for every worker it ever saw.
        """
        in_use = self._core.endpoints()
        for endpoint in [e for e in self._sockets_by_endpoint if e not in in_use]:
            sock = self._sockets_by_endpoint.pop(endpoint)
            self._versions.pop(endpoint, None)
            monitor = self._links.forget(endpoint)
            if monitor is not None:
                self._loop_poller.unregister(monitor)
                auth.close_monitor(sock, monitor)
            self.close_socket(sock)

    def _on_dispatcher(self, message: m.Message, _parts: list[Any], now: float) -> None:
        if message.request_id in self._trace_requests:
            if isinstance(message, m.Error):
                logger.info("trace spans refused: %s", message.message)
            return
        if isinstance(message, m.IterationState):
            self.tracer.replied(message.request_id, message.trace)
        self._handle(FromDispatcher(message), now)

    def _on_worker(self, header: m.Message, parts: list[Any], now: float) -> None:
        self._handle(received(header, parts, self._segments), now)

    def _report_trace(self) -> None:
        """Sends the spans of the trace window (closing it)."""
        log = self.tracer.finish()
        if log is None:
            return
        core = self._core
        self._trace_requests = self.tracer.send_report(
            log, core.next_request_id, self.to_dispatcher, client_id=core.client_id
        )

    def _drain(self, sock: zmq.Socket[Any], endpoint: str, handle: Any) -> None:
        """Hands every message waiting on ``sock`` to ``handle(header, parts, now)``.

        A refusal of this protocol version by an older peer is not handed on:
        what it refused is sent again at the peer's version.
        """
        while True:
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            now = clock.now()
            try:
                header, version = m.decode_versioned(parts[0].buffer)
                again = self._version_of(endpoint).received(header, version, now)
                if again is None:
                    handle(header, parts, now)
                for refused in again or ():
                    with contextlib.suppress(zmq.Again):
                        self._send(endpoint, refused)
            except ZmqDataError as error:
                self._handle(Broken(error), now)


class DistributedIterator(DatasetIterator):
    """Elements of one iteration of a job, read from the service's workers.

    A ``distributed_epoch`` read of its own (no ``job_name``) can save its
    position (``get_state``: the source keys consumed, no element) and
    resume from one (``set_state``: a new iteration that hands out only the
    keys not consumed). So can each consumer of a multi-rank read. What the
    read consumed is its ``progress`` (``position.py``: by keys, or dealt),
    which also says when the read joins its iteration: at once, or (a
    multi-rank read) on its first element, so that ``set_state`` before it
    (every rank restoring the merged position) starts the iteration there.
    """

    def __init__(
        self,
        options: ReadOptions,
        settings: ClientSettings,
        job_id: int,
        repetition: int,
        progress: Progress,
    ) -> None:
        self._options, self._settings = options, settings
        self._closed = True
        self._progress = progress
        self._pending: tuple[int, int] | None = (job_id, repetition)
        if not progress.lazy:
            self._start_pending(None)

    def _start_pending(self, resume: list[int] | None) -> None:
        """Joins the iteration this iterator reads (once), resuming at ``resume``."""
        if self._pending is not None:
            job_id, repetition = self._pending
            self._pending = None
            self._start(job_id, repetition, resume)

    def _start(self, job_id: int, repetition: int, resume: list[int] | None) -> None:
        request = self._progress.iteration(job_id, repetition, resume)
        state = rpc.call(
            self._options.service,
            request,
            m.IterationState,
            self._settings.dispatcher_timeout_s,
        )
        if state.finished:
            logger.warning(
                "iteration %d of job %r was drained by other consumers before this "
                "one joined: it gets no elements of it (a new run needs a fresh "
                "job_name)",
                repetition,
                self._options.job_name,
            )
        self._progress.started(state, resume)
        # A SimpleQueue: Ctrl-C in a ``queue.Queue`` wait can leave its lock
        # taken (or released under the fetcher), and the next put hang.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._local: deque[Any] = deque()
        self._counters = Counters(held=self._local)
        self._local_bytes = 0
        self._returned_ns = 0
        """A trace window: when ``next()`` last returned (a "step" starts)."""
        self._fetcher = Fetcher(
            self._options, self._settings, state, self._queue, self._counters
        )
        self._closed = False  # open first: Ctrl-C in ``start`` still releases it
        _open_iterators.add(self)
        try:
            self._fetcher.start()
        except BaseException:
            self.close()
            raise

    def __next__(self) -> Any:
        if self._pending is not None:
            self._start_pending(None)
        log = self._fetcher.tracer.log  # a trace window: waits and steps are spans
        if log is None:
            self._returned_ns = 0
            return self._next()
        entered = time.perf_counter_ns()
        if self._returned_ns:
            log.add("step", "trainer", self._returned_ns, entered)
        waits = not self._local
        element = self._next()
        self._returned_ns = time.perf_counter_ns()
        if waits:
            log.add("wait", "trainer", entered, self._returned_ns)
        return element

    def _next(self) -> Any:
        local, counters = self._local, self._counters
        if not local:  # per batch, not per element
            self._refill()
        element = local.popleft()
        self._progress.consumed_one()
        if not local:  # a batch's bytes count as buffered until handed out
            counters.consumed_bytes += self._local_bytes
            self._local_bytes = 0
        if counters.starved:
            counters.starved = False
            self._fetcher.waker.wake(0)
        return element

    def _refill(self) -> None:
        """Waits for the next batch; raises at the read's end or failure."""
        while not self._local:
            if self._closed:
                raise StopIteration
            item = self._wait_for_item()
            if item is not None:
                self._take(item)

    def _wait_for_item(self) -> Any:
        """The next item of the queue, or None after a poll interval without one.

        The time waited counts as demand the workers do not meet (autoscaling).
        """
        waiting = time.monotonic()
        try:
            item = self._queue.get(timeout=_QUEUE_POLL_S)
        except queue.Empty:
            item = None
        self._counters.waited_s += time.monotonic() - waiting
        if item is None and not self._fetcher.running:
            self.close()
            raise UnavailableError("the reader thread ended unexpectedly") from None
        return item

    def _take(self, item: Any) -> None:
        """Buffers a batch of the queue; ends or fails the read on ``END``, a ``Failure``."""
        if item is END:
            self.close()
            raise StopIteration
        if isinstance(item, Failure):
            self.close()
            raise item.error
        batch: Batch = item
        self._local.extend(batch.elements)  # then counted: credit lags, never leads
        self._counters.taken += len(batch.elements)
        self._local_bytes = batch.nbytes
        self._progress.took(batch)

    def get_state(self) -> dict[str, Any]:
        """The read's position: the source keys consumed (small: no element).

        Raises ``FailedPreconditionError`` for a read whose position cannot be
        resumed (``parallel_epochs``, a shared job, coordinated reads). A
        multi-rank read's is this consumer's share (``service.merge_positions``).
        """
        self._start_pending(None)
        return self._progress.state(self._options, len(self._local))

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from a saved position: a new job hands out the keys not consumed.

        The elements that were buffered or in flight when the state was saved
        come again; none that had been consumed does.
        """
        resume = self._progress.resume_from(self._options, state)
        pending = self._pending
        self.close()
        job_id = open_job(self._options, self._settings)
        self._start(job_id, 0 if pending is None else pending[1], resume)

    def close(self) -> None:
        """Stops the fetcher (and releases this reader); idempotent, any thread.

        A ``__next__`` waiting in another thread (a ``prefetch`` producer)
        wakes at once and ends.
        """
        self._pending = None
        if not self._closed:
            self._closed = True
            _open_iterators.discard(self)
            self._queue.put(END)
            self._fetcher.stop()

    def __del__(self) -> None:
        # At interpreter exit the fetcher thread is frozen: the atexit hook has
        # closed every open reader while it could still run.
        if not getattr(self, "_closed", True) and not sys.is_finalizing():
            self.close()


_open_iterators: weakref.WeakSet[DistributedIterator] = weakref.WeakSet()


@atexit.register
def _close_open_iterators() -> None:
    """Closes the readers left open when the interpreter exits.

    A script that ends mid-iteration, or a ``KeyboardInterrupt``, leaves them
    open; closing them here, while their threads still run, takes milliseconds.
    """
    for iterator in list(_open_iterators):
        iterator.close()
