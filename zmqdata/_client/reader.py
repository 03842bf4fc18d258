"""Reading a job: ``DistributedIterator`` (trainer side) and its fetcher thread.

The fetcher owns every client socket: a DEALER to the dispatcher (heartbeats
that carry task lists and end-of-input) and one DEALER per worker data
endpoint. It keeps at most ``max_outstanding`` elements requested or buffered
(workers long-poll, so the first element of any task arrives as soon as it
exists), and hands decoded batches to the trainer through a queue. Order
across tasks is first-come-first-served.

A task has one request in flight, for its share of the free credit; workers
answer with everything buffered, so small elements arrive in large batches.
When that share is more than ``REQUEST_BYTES`` of elements (large arrays), a
task gets requests of about ``REQUEST_BYTES`` each, ``PIPELINED_REQUESTS`` of
them in flight, so the link never idles while the next request travels.
Replies on one connection keep their order, so one worker's order is kept.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import zmq

from zmqdata._client import rpc
from zmqdata._client.links import Links
from zmqdata._client.settings import ClientSettings
from zmqdata._dataset.iterator import DatasetIterator
from zmqdata._runtime import auth
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.process import PROCESS_TOKEN
from zmqdata._runtime.waker import Waker
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata.errors import (
    FailedPreconditionError,
    PermissionDeniedError,
    UnavailableError,
    ZmqDataError,
    from_code,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_OUTSTANDING = 1024
DEFAULT_MAX_BUFFERED_BYTES = 256 * 2**20
SHARED_MAX_OUTSTANDING = 128
"""Default credit of a consumer of a named job, which others may read too: one
consumer must not prefetch the whole job (tf.data's testSharedJobName)."""
REQUEST_BYTES = 16 * 2**20
"""Large elements are asked for about this many bytes per request, ..."""
PIPELINED_REQUESTS = 2
"""... with this many requests in flight per task (see the module docstring)."""
_END = object()
_QUEUE_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a consumer asked for in ``distribute`` / ``from_dataset_id``."""

    service: str
    dataset_id: str
    processing_mode: int
    job_name: str | None
    max_outstanding_requests: int | None
    data_transfer_protocol: str | None
    target_workers: str
    consumer_index: int | None = None
    num_consumers: int | None = None
    trainer_id: str | None = None


@dataclass
class _Failure:
    error: BaseException


@dataclass
class _Task:
    task_id: int
    endpoint: str
    ticket: bytes = b""
    """CurveZMQ: the read ticket the dispatcher gave this client's key."""
    requests: dict[int, int] = field(default_factory=dict)
    """Requests in flight: request id -> elements asked for."""
    finished: bool = False
    retry_at: float = 0.0
    retries: int = 0
    asked: int = 0
    """The request id of the last request sent (credit goes to the longest idle)."""

    @property
    def outstanding(self) -> int:
        return sum(self.requests.values())


@dataclass
class _Counters:
    """Single-writer counters: the fetcher writes ``received``, the trainer ``consumed``."""

    received: int = 0
    received_bytes: int = 0
    consumed: int = 0
    consumed_bytes: int = 0
    starved: bool = False
    sizes: deque[int] = field(default_factory=lambda: deque(maxlen=64))

    def average_size(self) -> int | None:
        """Decoded bytes per element over the last replies (None before any)."""
        if not self.sizes:
            return None
        return max(1, sum(self.sizes) // len(self.sizes))


def _default_credit(options: ReadOptions) -> int:
    """Credit without ``max_outstanding_requests``: small when consumers share elements.

    Consumers of a named job split its elements first come, first served; with
    a cross-trainer cache each trainer reads them all, so it keeps full credit.
    """
    shared = options.job_name is not None and options.trainer_id is None
    return SHARED_MAX_OUTSTANDING if shared else DEFAULT_MAX_OUTSTANDING


class Fetcher(PollLoop):
    def __init__(
        self,
        options: ReadOptions,
        settings: ClientSettings,
        state: m.IterationState,
        out: queue.Queue[Any],
        counters: _Counters,
    ) -> None:
        super().__init__("zmqdata-reader")
        self._options, self._settings = options, settings
        self._keys = settings.keys()
        self._client_id = state.client_id
        self._out, self._counters = out, counters
        self._capacity = options.max_outstanding_requests or _default_credit(options)
        self._byte_cap = (
            None if options.max_outstanding_requests else DEFAULT_MAX_BUFFERED_BYTES
        )
        self._tasks: dict[int, _Task] = {}
        self._sockets_by_endpoint: dict[str, zmq.Socket[Any]] = {}
        # Connection state of every socket: a refused CURVE handshake fails the
        # read; a worker unreachable for worker_timeout_s fails it too.
        self._links = Links(settings.worker_timeout_s)
        self._in_flight = 0
        self._requests: dict[int, _Task] = {}
        self._finished = False
        self._done = False
        self._initial = state
        self._incarnation: str | None = None
        self._heartbeat_due = 0.0
        self._last_dispatcher_reply = time.monotonic()
        self._last_worker_reply = time.monotonic()
        self._request_id = 0
        self.waker = Waker()
        self.tick_s = min(0.05, settings.heartbeat_s)

    # ------------------------------------------------------------ loop hooks

    def setup(self) -> None:
        self._dispatcher = self.socket(zmq.DEALER)
        self._connect(self._dispatcher, self._options.service)
        self.watch(self.waker.fileno())
        self._apply_state(self._initial)
        self._request_more()

    def on_readable(self, sock: Any) -> None:
        if isinstance(sock, int):
            self.waker.drain()
        elif sock in self._links:
            try:
                lost = self._links.read(sock, time.monotonic())
            except PermissionDeniedError as error:
                self._fail(error)
                return
            self._forget_requests_to(lost)
        elif sock is self._dispatcher:
            self._drain(sock, self._on_dispatcher)
        else:
            self._drain(sock, self._on_worker)
        self._request_more()

    def on_tick(self, now: float) -> None:
        if self._done:
            return
        if now >= self._heartbeat_due:
            self._heartbeat(now)
        silent = now - self._last_dispatcher_reply
        workers_silent = now - self._last_worker_reply
        timeout = self._settings.dispatcher_timeout_s
        if silent > timeout and (
            not self._readable_tasks() or workers_silent > timeout
        ):
            self._fail(
                UnavailableError(
                    f"dispatcher {self._options.service} silent for {silent:.0f} s "
                    "and no worker left to read from (or none answered for "
                    f"{workers_silent:.0f} s)"
                )
            )
            return
        self._fail_unreachable(now)
        self._request_more()

    def _fail_unreachable(self, now: float) -> None:
        """Fails the read if a task's worker has been unreachable for too long."""
        timeout = self._settings.worker_timeout_s
        for task in self._readable_tasks():
            down = self._links.down_for(task.endpoint, now)
            if down > timeout:
                self._fail(
                    UnavailableError(
                        f"worker {task.endpoint} (task {task.task_id}) unreachable "
                        f"for {down:.1f} s, over ZMQDATA_WORKER_TIMEOUT_S={timeout:g}: "
                        "is its advertised address reachable from this host?"
                    )
                )
                return

    def teardown(self) -> None:
        self._dispatcher.setsockopt(zmq.LINGER, 100)  # let the release go out
        with contextlib.suppress(zmq.Again):  # dispatcher gone: it times us out
            self._dispatcher.send(
                m.encode(m.ReleaseIterationClient(client_id=self._client_id)),
                zmq.NOBLOCK,
            )
        self.waker.close()
        self._links.close()

    def _connect(self, sock: zmq.Socket[Any], endpoint: str) -> None:
        auth.secure_client(sock, self._keys)
        monitor = self._links.watch(sock, endpoint, time.monotonic())
        self._loop_poller.register(monitor, zmq.POLLIN)
        sock.connect(endpoint)

    # ------------------------------------------------------------ dispatcher

    def _heartbeat(self, now: float) -> None:
        self._request_id += 1
        finished = [
            t.task_id for t in self._tasks.values() if t.finished and not t.requests
        ]
        heartbeat = m.ClientHeartbeat(
            request_id=self._request_id,
            client_id=self._client_id,
            finished_tasks=finished,
            current_round=self._current_round(),
        )
        # Never block the loop: with the dispatcher gone the queue fills up, and
        # its silence is noticed in on_tick.
        with contextlib.suppress(zmq.Again):
            self._dispatcher.send(m.encode(heartbeat), zmq.NOBLOCK)
        self._heartbeat_due = now + self._settings.heartbeat_s

    def _current_round(self) -> int | None:
        """Coordinated reads report their round; first-come readers have none."""
        return None

    def _on_dispatcher(self, parts: list[Any]) -> None:
        message = m.decode(parts[0].buffer)
        self._last_dispatcher_reply = time.monotonic()
        if isinstance(message, m.IterationState):
            self._apply_state(message)
        elif isinstance(message, m.Error):
            self._fail(from_code(message.code, message.message))

    def _apply_state(self, state: m.IterationState) -> None:
        if self._incarnation is None:
            self._incarnation = state.incarnation
        elif state.incarnation != self._incarnation:
            self._fail(
                FailedPreconditionError(
                    f"dispatcher {self._options.service} restarted without "
                    "fault_tolerant_mode and lost this job's state; start a new iterator"
                )
            )
            return
        listed = set()
        for info in state.tasks:
            if not self._wanted(info):
                continue
            listed.add(info["task_id"])
            if info["task_id"] not in self._tasks:
                self._tasks[info["task_id"]] = _Task(
                    info["task_id"], self._endpoint(info), info.get("ticket", b"")
                )
        for task_id in list(self._tasks):
            if task_id not in listed:  # its worker is gone: skip what it owed us
                self._forget_requests(self._tasks.pop(task_id))
        self._close_unused_sockets()
        self._finished = state.finished
        self._maybe_end()

    def _close_unused_sockets(self) -> None:
        """Closes the sockets of workers no task is read from any more.

        Workers come and go (restarts, autoscaling): a long read must not keep
        a socket, and its reconnect attempts, for every worker it ever saw.
        """
        in_use = {task.endpoint for task in self._tasks.values()}
        for endpoint in [e for e in self._sockets_by_endpoint if e not in in_use]:
            sock = self._sockets_by_endpoint.pop(endpoint)
            monitor = self._links.forget(endpoint)
            if monitor is not None:
                self._loop_poller.unregister(monitor)
                auth.close_monitor(sock, monitor)
            self.close_socket(sock)

    def _wanted(self, info: dict[str, Any]) -> bool:
        local = info.get("local_process") == PROCESS_TOKEN
        return local or self._options.target_workers != "LOCAL"

    def _endpoint(self, info: dict[str, Any]) -> str:
        local = info.get("local_process") == PROCESS_TOKEN and info.get(
            "inproc_address"
        )
        if local and self._options.data_transfer_protocol in (None, "inproc"):
            return str(info["inproc_address"])
        return str(info["data_address"])

    # ------------------------------------------------------------ workers

    def _forget_requests(self, task: _Task) -> None:
        """Drops ``task``'s requests in flight, which will never be answered."""
        self._in_flight -= task.outstanding
        for request_id in task.requests:
            self._requests.pop(request_id, None)
        task.requests.clear()

    def _forget_requests_to(self, endpoints: list[str]) -> None:
        """A lost connection loses its replies: frees their credit for other tasks.

        The tasks are asked again once their worker is connected again.
        """
        for task in self._tasks.values():
            if task.endpoint in endpoints:
                self._forget_requests(task)
                self._report_if_finished(task)

    def _socket_for(self, endpoint: str) -> zmq.Socket[Any]:
        sock = self._sockets_by_endpoint.get(endpoint)
        if sock is None:
            sock = self.socket(zmq.DEALER)
            self._connect(sock, endpoint)
            self._sockets_by_endpoint[endpoint] = sock
        return sock

    def _readable_tasks(self) -> list[_Task]:
        return [t for t in self._tasks.values() if not t.finished]

    def _request_more(self) -> None:
        if self._done:
            return
        now = time.monotonic()
        readable = self._readable_tasks()
        chunk = self._pipelined_chunk(len(readable))
        depth = 1 if chunk is None else PIPELINED_REQUESTS
        idle = [
            t
            for t in readable
            if len(t.requests) < depth
            and t.retry_at <= now
            and not self._links.lost(t.endpoint)
        ]
        idle.sort(key=lambda t: t.asked)  # scarce credit rotates over the tasks
        free = self._free_credit()
        self._counters.starved = bool(idle) and free <= 0
        for task in idle:
            if free <= 0:
                return
            n = max(1, free // len(idle))
            if chunk is not None:
                n = min(n, chunk)
            self._request_id += 1
            request = m.GetElements(
                request_id=self._request_id,
                task_id=task.task_id,
                client_id=self._client_id,
                max_elements=n,
                trainer_id=self._options.trainer_id,
                ticket=task.ticket,
            )
            try:
                self._socket_for(task.endpoint).send(m.encode(request), zmq.NOBLOCK)
            except zmq.Again:
                # No way to the worker (it is gone): ask again later, until the
                # dispatcher drops its task.
                task.retries += 1
                task.retry_at = now + min(0.1, 0.002 * 2**task.retries)
                continue
            task.requests[self._request_id] = n
            task.asked = self._request_id
            self._requests[self._request_id] = task
            self._in_flight += n
            free -= n

    def _pipelined_chunk(self, tasks: int) -> int | None:
        """Elements per pipelined request, or None to ask for the whole share.

        Requests are pipelined when a task's share of credit is worth more
        than ``REQUEST_BYTES`` of elements (by the running average size).
        """
        average = self._counters.average_size()
        if average is None or not tasks:
            return None
        chunk = max(1, REQUEST_BYTES // average)
        return chunk if chunk < self._capacity // tasks else None

    def _free_credit(self) -> int:
        counters = self._counters
        buffered = counters.received - counters.consumed
        free = self._capacity - self._in_flight - buffered
        if self._byte_cap is None:
            return free
        average = counters.average_size()
        if average is None:
            # No element size known yet: one element in flight, whose reply
            # (with everything the worker had buffered) shows the size.
            return 1 - self._in_flight - buffered
        buffered_bytes = counters.received_bytes - counters.consumed_bytes
        by_bytes = (self._byte_cap - buffered_bytes) // average - self._in_flight
        return min(free, by_bytes)

    def _on_worker(self, parts: list[Any]) -> None:
        self._last_worker_reply = time.monotonic()
        header = m.decode(parts[0].buffer)
        if isinstance(header, m.Error):
            self._on_worker_error(header)
            return
        if not isinstance(header, m.Elements):
            return
        task = self._requests.pop(header.request_id, None)
        if task is None:
            return  # the task was dropped meanwhile (with its requests)
        self._in_flight -= task.requests.pop(header.request_id, 0)
        task.retries = 0
        self._deliver(*decode_elements(header, parts))
        if header.end_of_sequence:
            task.finished = True
        self._report_if_finished(task)

    def _report_if_finished(self, task: _Task) -> None:
        """Reports a task ended once nothing more is owed by it."""
        if task.finished and not task.requests:
            self._heartbeat(time.monotonic())
            self._maybe_end()

    def _deliver(self, elements: list[Any], nbytes: int) -> None:
        """Hands decoded elements to the trainer thread."""
        if elements:
            self._counters.sizes.append(max(1, nbytes // len(elements)))
            self._counters.received += len(elements)
            self._counters.received_bytes += nbytes
            self._out.put((elements, nbytes))

    def _on_worker_error(self, error: m.Error) -> None:
        task = self._requests.pop(error.request_id, None)
        if task is None:
            return  # answers a request dropped with its task (a worker that left)
        if error.code == "NOT_FOUND":
            # The worker has not started the task yet: ask again soon.
            self._in_flight -= task.requests.pop(error.request_id, 0)
            if task.finished:
                self._report_if_finished(task)
                return
            task.retries += 1
            task.retry_at = time.monotonic() + min(0.1, 0.002 * 2**task.retries)
            return
        self._fail(from_code(error.code, error.message))

    # ------------------------------------------------------------ ending

    def _maybe_end(self) -> None:
        """Ends once the iteration is over and nothing is owed to this reader.

        A LOCAL reader ends when every task it reads has ended: the tasks of
        other processes' workers, which it never reads, never finish for it.
        """
        busy = any(t.outstanding for t in self._tasks.values())
        local_done = self._options.target_workers == "LOCAL" and bool(self._tasks)
        over = self._finished or local_done
        if over and not busy and not self._readable_tasks() and not self._done:
            self._done = True
            self._out.put(_END)

    def _fail(self, error: BaseException) -> None:
        if not self._done:
            self._done = True
            self._out.put(_Failure(error))

    def _drain(self, sock: zmq.Socket[Any], handle: Any) -> None:
        while True:
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                handle(parts)
            except ZmqDataError as error:
                self._fail(error)


def decode_elements(header: m.Elements, parts: list[Any]) -> tuple[list[Any], int]:
    """The elements of a data reply, and the bytes they hold once decoded.

    Checked as ``frames.decode_messages`` does: within the codec's limits, and
    exactly the frames and the ``count`` elements the header lists.
    """
    return frames.decode_messages(parts[1:], header.parts, header.count)


class DistributedIterator(DatasetIterator):
    """Elements of one iteration of a job, read from the service's workers."""

    def __init__(
        self,
        options: ReadOptions,
        settings: ClientSettings,
        job_id: int,
        repetition: int,
        fetcher_type: type[Fetcher] = Fetcher,
    ) -> None:
        state = rpc.call(
            options.service,
            m.GetOrCreateIteration(job_id=job_id, repetition=repetition),
            m.IterationState,
            settings.dispatcher_timeout_s,
        )
        self._queue: queue.Queue[Any] = queue.Queue()
        self._counters = _Counters()
        self._local: deque[Any] = deque()
        self._local_bytes = 0
        self._fetcher = fetcher_type(
            options, settings, state, self._queue, self._counters
        )
        self._fetcher.start()
        self._closed = False
        _open_iterators.add(self)

    def __next__(self) -> Any:
        while not self._local:
            if self._closed:
                raise StopIteration
            try:
                item = self._queue.get(timeout=_QUEUE_POLL_S)
            except queue.Empty:
                if not self._fetcher.running:
                    self.close()
                    raise UnavailableError(
                        "the reader thread ended unexpectedly"
                    ) from None
                continue
            if item is _END:
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.error
            elements, nbytes = item
            self._local.extend(elements)
            self._local_bytes = nbytes
        element = self._local.popleft()
        self._counters.consumed += 1
        if not self._local:  # a batch's bytes count as buffered until handed out
            self._counters.consumed_bytes += self._local_bytes
            self._local_bytes = 0
        if self._counters.starved:
            self._counters.starved = False
            self._fetcher.waker.wake(0)
        return element

    def close(self) -> None:
        """Stops the fetcher (and releases this reader); idempotent, any thread.

        A ``__next__`` waiting in another thread (a ``prefetch`` producer)
        wakes at once and ends.
        """
        if not self._closed:
            self._closed = True
            _open_iterators.discard(self)
            self._queue.put(_END)
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
