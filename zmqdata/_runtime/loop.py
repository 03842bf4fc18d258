"""``PollLoop``: a thread that owns its sockets and runs one ``zmq.Poller`` loop.

Subclasses create their sockets in ``setup()`` (on the loop thread), react to
readable sockets in ``on_readable()`` and do periodic work in ``on_tick()``.
``stop()`` sends a byte on an inproc PAIR pipe, joins the thread with a
deadline, and the loop closes every socket it made with ``linger=0`` so ports
are free when ``stop()`` returns. ZeroMQ closes listeners asynchronously on its
I/O thread, so endpoints bound with ``PollLoop.bind`` are unbound first and the
loop waits (briefly) for the socket monitor to report them closed; the files of
ipc endpoints are removed (libzmq leaves them behind).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import zmq

from zmqdata._runtime import clock, ipc
from zmqdata.errors import DeadlineExceededError, UnavailableError

T = TypeVar("T")

_STOP = b"STOP"
_ids = itertools.count()
START_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 30.0
UNBIND_TIMEOUT_MS = 2_000
BIND_RETRY_S = 5.0
"""How long a bind is retried while its address is still in use."""
MAX_MESSAGE_BYTES = 1 << 30
"""Largest inbound frame a server socket accepts (``zmq.MAXMSGSIZE``): a peer that
sends more is disconnected before the frame is buffered."""


def context() -> zmq.Context[Any]:
    """The process-wide ZeroMQ context (shared so inproc endpoints connect)."""
    return zmq.Context.instance()


class PollLoop:
    """Lifecycle (start/stop/join) of one socket-owning thread."""

    tick_s: float = 0.1

    def __init__(self, name: str) -> None:
        self.name = name
        role = "worker" if "worker" in name else "dispatcher"
        self.log = logging.getLogger(f"zmqdata.{role}")
        self._stop_endpoint = f"inproc://zmqdata-stop-{next(_ids)}"
        self._loop_sockets: list[zmq.Socket[Any]] = []
        self._listeners: list[tuple[zmq.Socket[Any], str, zmq.Socket[Any]]] = []
        self._ipc_files: list[tuple[str, tuple[int, int] | None]] = []
        self._loop_poller = zmq.Poller()
        self._loop_thread: threading.Thread | None = None
        self._loop_ready = threading.Event()
        self._loop_finished = threading.Event()
        self._startup_error: BaseException | None = None
        self.failure: BaseException | None = None
        """The error that ended the loop while it served (None: stopped or running)."""
        self._loop_lock = threading.Lock()

    # ------------------------------------------------------------ for subclasses

    def socket(self, kind: int, *, poll: bool = True) -> zmq.Socket[Any]:
        """A new socket owned by the loop thread (closed when the loop ends)."""
        sock: zmq.Socket[Any] = context().socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        self._loop_sockets.append(sock)
        if poll:
            self._loop_poller.register(sock, zmq.POLLIN)
        return sock

    def bind(
        self,
        sock: zmq.Socket[Any],
        protocol: str,
        host: str,
        port: int,
        max_message_bytes: int | None = None,
    ) -> str:
        """Binds like ``bind``; the port is free again when ``stop`` returns.

        Every socket a server binds gets ``MAXMSGSIZE = max_message_bytes``
        (default ``MAX_MESSAGE_BYTES``).
        """
        if max_message_bytes is None:
            max_message_bytes = MAX_MESSAGE_BYTES
        sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        endpoint = bind(sock, protocol, host, port)
        if protocol in ("tcp", "ipc"):
            monitor = sock.get_monitor_socket(zmq.EVENT_CLOSED)
            monitor.setsockopt(zmq.LINGER, 0)
            self._listeners.append((sock, endpoint, monitor))
        if protocol == "ipc":
            path = endpoint.split("://", 1)[1]
            self._ipc_files.append((path, ipc.file_id(path)))
        return endpoint

    def close_socket(self, sock: zmq.Socket[Any]) -> None:
        """Closes one socket made by ``socket`` before the loop ends."""
        if sock in self._loop_sockets:
            self._loop_sockets.remove(sock)
            self._loop_poller.unregister(sock)
        sock.close(linger=0)

    def watch(self, fd: int) -> None:
        """Also polls a file descriptor (``on_readable`` gets the int)."""
        self._loop_poller.register(fd, zmq.POLLIN)

    def setup(self) -> None:
        """Creates and binds sockets; runs on the loop thread before ``start`` returns."""

    def on_readable(self, sock: Any) -> None:
        """Handles a socket (or watched descriptor) with messages waiting."""

    def on_tick(self, now: float) -> None:
        """Periodic work, at least every ``tick_s`` seconds."""

    def teardown(self) -> None:
        """Last work on the loop thread before its sockets close."""

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Starts the loop thread; returns once ``setup`` is done (or raises its error)."""
        with self._loop_lock:
            if self._loop_thread is not None:
                return
            self._loop_thread = threading.Thread(
                target=self._main, name=self.name, daemon=True
            )
            self._loop_thread.start()
        if not self._loop_ready.wait(START_TIMEOUT_S):
            raise DeadlineExceededError(
                f"{self.name} did not start in {START_TIMEOUT_S} s"
            )
        if self._startup_error is not None:
            raise self._startup_error

    def stop(self) -> None:
        """Stops the loop and closes its sockets; idempotent."""
        with self._loop_lock:
            thread = self._loop_thread
        if thread is None or self._loop_finished.is_set():
            self._loop_finished.wait(JOIN_TIMEOUT_S) if thread is not None else None
            return
        pipe = context().socket(zmq.PAIR)
        pipe.setsockopt(zmq.LINGER, 0)
        try:
            pipe.connect(self._stop_endpoint)
            pipe.send(_STOP)
            if not self._loop_finished.wait(JOIN_TIMEOUT_S):
                raise DeadlineExceededError(
                    f"{self.name} did not stop in {JOIN_TIMEOUT_S} s"
                )
        finally:
            pipe.close()
        thread.join(JOIN_TIMEOUT_S)

    def join(self, timeout: float | None = None) -> None:
        """Blocks until the loop has stopped (or ``timeout`` passes).

        Raises ``UnavailableError`` if the loop ended by crashing, so a daemon
        waiting here exits with an error instead of living on as a zombie.
        """
        self._loop_finished.wait(timeout)
        if self.failure is not None:
            raise UnavailableError(
                f"{self.name} stopped on an unexpected error: {self.failure!r}"
            ) from self.failure

    @property
    def running(self) -> bool:
        """Whether the loop thread is serving."""
        return self._loop_ready.is_set() and not self._loop_finished.is_set()

    def _main(self) -> None:
        stop_rx = self.socket(zmq.PAIR)
        try:
            stop_rx.bind(self._stop_endpoint)
            self.setup()
        except BaseException as error:
            self._startup_error = (
                error if isinstance(error, Exception) else UnavailableError(str(error))
            )
            self._close_all()
            self._loop_ready.set()
            self._loop_finished.set()
            return
        self._loop_ready.set()
        try:
            self._run(stop_rx)
        except Exception as error:
            self.failure = error
            self.log.exception("%s crashed", self.name)
        finally:
            try:
                self.teardown()
            finally:
                self._close_all()
                self._loop_finished.set()

    def _run(self, stop_rx: zmq.Socket[Any]) -> None:
        next_tick = time.monotonic()
        while True:
            timeout_ms = max(0.0, (next_tick - time.monotonic()) * 1000)
            # Rounded up: under 1 ms left would poll(0) in a loop until the tick.
            events = dict(self._loop_poller.poll(math.ceil(timeout_ms)))
            if stop_rx in events:
                return
            for sock in events:
                if not getattr(sock, "closed", False):  # closed by an earlier handler
                    self.on_readable(sock)
            now = time.monotonic()
            if now >= next_tick:
                self.on_tick(now)
                next_tick = now + self.tick_s

    def _close_all(self) -> None:
        for sock, endpoint, monitor in self._listeners:
            try:
                sock.unbind(endpoint)
                if monitor.poll(UNBIND_TIMEOUT_MS):  # the listener's EVENT_CLOSED
                    monitor.recv_multipart()
                else:
                    self.log.warning("%s: %s not closed in time", self.name, endpoint)
                sock.disable_monitor()
            except zmq.ZMQError as error:
                self.log.warning("%s: cannot unbind %s: %s", self.name, endpoint, error)
            finally:
                monitor.close(linger=0)
        self._listeners.clear()
        for path, bound in self._ipc_files:
            ipc.remove(path, bound)
        self._ipc_files.clear()
        for sock in self._loop_sockets:
            sock.close()  # with its LINGER option: 0 unless a loop asked for more
        self._loop_sockets.clear()


def retry_bind(attempt: Callable[[], T]) -> T:
    """Calls ``attempt`` (a bind) again while its address is in use, for up to 5 s.

    A just-stopped server frees its address asynchronously.
    """
    return clock.retry(
        attempt,
        lambda error: isinstance(error, zmq.ZMQError) and error.errno == zmq.EADDRINUSE,
        BIND_RETRY_S,
        clock.Backoff(0.02, 0.02, jitter=0.0),
    )


def bind(sock: zmq.Socket[Any], protocol: str, host: str, port: int) -> str:
    """Binds ``sock`` and returns the real endpoint (port 0 picks a free port).

    Retries briefly on "address in use", which a just-stopped server can cause.
    """
    if protocol == "tcp":
        endpoint = f"tcp://{host}:{port or '*'}"
    elif protocol == "ipc":
        endpoint = f"ipc://{host}"
    else:
        endpoint = f"{protocol}://{host}"
    try:
        retry_bind(lambda: sock.bind(endpoint))
    except zmq.ZMQError as error:
        raise UnavailableError(f"cannot bind {endpoint}: {error}") from None
    real: bytes = sock.getsockopt(zmq.LAST_ENDPOINT)  # type: ignore[assignment]
    return real.decode()
