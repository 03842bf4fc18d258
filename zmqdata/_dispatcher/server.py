"""``DispatchServer``: the dispatcher's ROUTER socket around ``DispatcherState``."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any, Self

import zmq

from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import job_metrics
from zmqdata._dispatcher.access import Access
from zmqdata._dispatcher.journal import Journal, JournalSink
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.state import DispatcherState, stall_s
from zmqdata._runtime import auth, clock, ipc, metrics, tuning
from zmqdata._runtime.handoff import Handoff
from zmqdata._runtime.loop import PollLoop
from zmqdata._runtime.ratelog import RateLimitedLog
from zmqdata._wire import messages as m
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    ZmqDataError,
)

logger = logging.getLogger("zmqdata.dispatcher")

VALIDATE_ENV = "ZMQDATA_VALIDATE_STATE"
"""``1``: the dispatcher checks every invariant of its records
(``ClusterRecords.validate``) at every tick and logs a violation as
``records invalid: ...`` (the suite and its chaos trials set it)."""

MAX_BATCH = 1000
"""Requests handled per wake-up at most (then the loop ticks)."""
GROUP_MAX = 256
"""Requests handled as one group (one journal commit) at most."""
GROUP_MAX_UNJOURNALED = 16
"""Without a journal: requests waiting handled as one group at most (the
group's fixed costs paid once; its first reply waits for 15 more, ~0.5 ms)."""
SCRAPE_STATUS_TIMEOUT_S = 2.0
"""How long a scrape waits for the loop's status (then serves no job series)."""
LISTEN_BACKLOG = 4096
"""Connections the dispatcher's listener queues (``zmq.BACKLOG``, 100 by
default): a fleet reconnecting after a restart is not made to retry SYNs."""
COALESCE_S = 0.0005
"""After a wake-up that found several requests, how long the loop lets the
next ones gather before it polls again: under load each wake-up (a poll, a
context switch, a signal to ZeroMQ's I/O thread) serves many requests; a lone
request is answered at once, and a journal's group commit gathers by itself
(its fsync)."""
_SNDMORE = int(zmq.SNDMORE)


def _incarnation(work_dir: Path) -> str:
    """The id of the state kept in ``work_dir``: it survives restarts."""
    path = work_dir / "incarnation"
    if not path.exists():
        path.write_text(uuid.uuid4().hex)
    incarnation: str = path.read_text().strip()
    return incarnation


class _DispatcherLoop(PollLoop):
    """The dispatcher's one thread: its ROUTER socket around a pure ``DispatcherState``.

    Each request is decoded (one over ``max_request_bytes`` never arrives:
    libzmq disconnects its sender) and checked against its sender's CURVE role; what is sent to a peer is
    encoded at the protocol version it spoke last (``protocols.py``). Group commit (fault-tolerant
    mode): every request waiting (``GROUP_MAX`` at most) is handled by the
    state as one group, whose events are kept with one fsync, and only then
    are the group's replies sent. Without a journal a group is what is
    waiting, ``GROUP_MAX_UNJOURNALED`` at most. ``on_tick`` drives liveness and job
    GC. The state never sees a socket, so it is tested with a fake clock.
    """

    def __init__(self, config: DispatcherConfig) -> None:
        super().__init__("zmqdata-dispatcher")
        self.config = config
        self.state = DispatcherState(
            config, now=time.monotonic(), incarnation=uuid.uuid4().hex
        )
        self.journal: Journal | None = None
        self.endpoint = ""
        self._bad_input = RateLimitedLog(logger)
        self._keys = auth.server_keys(
            config.curve_secret_key_file,
            config.curve_authorized_keys_dir,
            config.curve_worker_keys_dir,
        )
        self._access = None if self._keys is None else Access(self._keys)
        self.scraped_status = Handoff[dict[str, Any]](logger)
        """The status a metrics scrape asks for, made at the loop's next tick."""
        self.tick_s = min(
            0.1,
            config.worker_timeout_ms / 4000,
            config.client_timeout_ms / 4000,
            config.job_gc_check_interval_ms / 1000,
        )
        self._stall_s = stall_s(config)
        self._validating = os.environ.get(VALIDATE_ENV) == "1"
        self._invalid = RateLimitedLog(logger)
        self._last_tick = time.monotonic()  # a tick much later: we stood still

    def setup(self) -> None:
        self._collector = tuning.collector(time.monotonic())
        if self.config.fault_tolerant_mode:
            assert self.config.work_dir is not None  # DispatcherConfig checks it
            self.journal = Journal(self.config.work_dir)
            self.state = DispatcherState(
                self.config,
                JournalSink(self.journal),
                time.monotonic(),
                _incarnation(Path(self.config.work_dir)),
            )
            records = self.state.records
            if self._access is not None:
                self._access.restore(records.clients.values())
            logger.info(
                "dispatcher state replayed from %s: %d workers, %d jobs, %d clients",
                self.journal.path,
                len(records.workers),
                len(records.jobs),
                len(records.clients),
            )
        self._router = self.socket(zmq.ROUTER)
        # A worker reconnecting with its routing id takes over the old pipe.
        self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._router.setsockopt(zmq.BACKLOG, LISTEN_BACKLOG)
        auth.secure_server(self._router, self._keys)
        auth.acquire(self._keys)
        try:
            protocol = self.config.protocol
            host = ipc.bind_host(protocol, self.config.host)
            self.endpoint = self.bind(
                self._router,
                protocol,
                host,
                self.config.port,
                max_message_bytes=self.config.max_request_bytes,
            )
            self.state.traces.name = f"dispatcher {self.endpoint}"
        except BaseException:
            auth.release(self._keys)
            if self.journal is not None:
                self.journal.close()
            raise
        logger.info(
            "dispatcher serving on %s%s",
            self.endpoint,
            " (CurveZMQ)" if self._keys else "",
        )
        if self._keys is not None and self._keys.worker_dir is None:
            logger.warning(
                "no curve_worker_keys_dir: every key in %s may register as a "
                "worker and receive every pipeline (docs/security.md, Upgrading "
                "to roles)",
                self._keys.authorized_dir,
            )

    def on_readable(self, sock: zmq.Socket[Any]) -> None:
        # Without a journal nothing waits for a commit: small groups.
        group_max = GROUP_MAX if self.journal is not None else GROUP_MAX_UNJOURNALED
        handled = 0
        while handled < MAX_BATCH:
            group: list[tuple[list[bytes], str | None]] = []
            while len(group) < group_max:
                try:
                    group.append(auth.recv_from(sock, self._access is not None))
                except zmq.Again:
                    break
            if not group:
                if handled > 1 and self.journal is None:  # busy: gather the next
                    clock.sleep(COALESCE_S)
                return
            log = self.state.tracer.log  # a trace window: the group is a span
            start = time.perf_counter_ns()
            self._send(self._handle_group(group))
            if log is not None:
                end = time.perf_counter_ns()
                log.add("group", "dispatcher", start, end, {"requests": len(group)})
            handled += len(group)

    def _handle_group(
        self, group: list[tuple[list[bytes], str | None]]
    ) -> list[Outgoing]:
        """The replies to a group of messages, each from a CURVE key (None: plain).

        Refusals are made here; the requests are handled by the state as one
        group (its events kept before it returns). Replies keep the order of
        the requests.
        """
        answers: list[list[Outgoing] | None] = []
        requests: list[tuple[bytes, m.Message]] = []
        keys: list[str] = []
        for frames, user in group:
            request, refused = self._check(frames, user)
            answers.append(refused)
            if request is not None:
                requests.append(request)
                keys.append(user or "")
        handled = iter(self.state.handle_group(requests, time.monotonic(), keys))
        outgoing: list[Outgoing] = []
        for (frames, user), refused in zip(group, answers, strict=True):
            if refused is not None:
                outgoing += refused
                continue
            replies = next(handled)
            if self._access is not None:
                replies = self._access.sign(user, frames[0], replies)
            outgoing += replies
        return outgoing

    def _check(
        self, frames: list[bytes], user: str | None
    ) -> tuple[tuple[bytes, m.Message] | None, list[Outgoing] | None]:
        """``((peer, request), None)`` for the state, or ``(None, refusal)``."""
        if len(frames) != 2:
            self._bad_input.warning("dropped a %d-frame message", len(frames))
            return None, []
        peer, payload = frames
        try:
            message, version = m.decode_versioned(payload)
            self.state.protocols.heard(peer, message, version)
            if self._access is not None:
                self._access.check(user, message)
        except (InvalidArgumentError, FailedPreconditionError) as error:
            self._bad_input.warning("bad request: %s", error.message)
            return None, self._refuse(peer, 0, error)
        except PermissionDeniedError as error:
            self._bad_input.warning("refused: %s", error.message)
            return None, self._refuse(peer, message.request_id, error)
        return (peer, message), None

    def _refuse(
        self, peer: bytes, request_id: int, error: ZmqDataError
    ) -> list[Outgoing]:
        self.state.requests_total += 1
        self.state.errors_total += 1
        reply = m.Error(request_id=request_id, code=error.code, message=error.message)
        return [Outgoing(peer, reply)]

    def on_tick(self, now: float) -> None:
        if now - self._last_tick > self._stall_s:
            self.state.resumed(now)
        self._last_tick = now
        if self._collector is not None:
            self._collector.tick(now)
        self._send(self.state.tick(now))
        if self._validating:
            self._check_records(now)
        self.scraped_status.serve(lambda: self.state.status(now))
        if self._access is not None:
            self._access.forget(self.state.records.clients)

    def _check_records(self, now: float) -> None:
        try:
            self.state.records.validate()
        except AssertionError as error:
            self._invalid.warning("%s", error, now=now)

    def teardown(self) -> None:
        if self._collector is not None:
            self._collector.close()
        auth.release(self._keys)
        if self.journal is not None:
            self.journal.close()

    def _send(self, outgoing: list[Outgoing]) -> None:
        """Sends each message at the version its peer spoke last (its request's).

        Two ``send`` calls with int flags: a third of ``send_multipart``'s cost.
        """
        spoken, send = self.state.protocols.peers, self._router.send
        for peer, message in outgoing:
            send(peer, _SNDMORE)
            send(m.encode(message, spoken.of(peer)))


def _collect(
    state: DispatcherState, journal: Journal | None, status: dict[str, Any] | None
) -> list[Any]:
    """The dispatcher's Prometheus metrics, read at scrape time.

    Runs on the metrics thread: only ``len()`` of the tables and int reads,
    which are atomic under the GIL (no iteration over tables the loop changes).
    The job series come from ``status``, which the loop thread made for the
    scrape (None: none in time, no job series).
    """
    records = state.records
    commits = []
    if journal is not None:
        commits.append(
            metrics.counter(
                "zmqdata_dispatcher_journal_commits",
                "Journal group commits (one write and one fsync each).",
                journal.commits,
            )
        )
    return [
        *commits,
        *([] if status is None else job_metrics.families(status)),
        metrics.gauge(
            "zmqdata_dispatcher_workers", "Live workers.", len(records.workers)
        ),
        metrics.gauge(
            "zmqdata_dispatcher_datasets", "Registered datasets.", len(records.datasets)
        ),
        metrics.gauge("zmqdata_dispatcher_jobs", "Jobs.", len(records.jobs)),
        metrics.gauge(
            "zmqdata_dispatcher_consumers",
            "Iteration clients (consumers) reading now.",
            len(records.clients),
        ),
        metrics.gauge(
            "zmqdata_dispatcher_recommended_workers",
            "Workers the autoscaler recommends (demand and supply; docs/deployment.md).",
            state.autoscaler.advice.recommended_workers,
        ),
        metrics.counter(
            "zmqdata_dispatcher_requests",
            "Requests handled (from workers and consumers).",
            state.requests_total,
        ),
        metrics.counter(
            "zmqdata_dispatcher_errors", "Error replies sent.", state.errors_total
        ),
        metrics.counter(
            "zmqdata_dispatcher_splits",
            "DYNAMIC splits handed out to workers.",
            state.splits_total,
        ),
    ]


class DispatchServer:
    """The dispatcher: registers datasets and workers, creates jobs, hands out splits.

    Runs on a background thread of this process. ``target`` is the address
    consumers and workers use.

    >>> from zmqdata import service
    >>> with service.DispatchServer() as dispatcher:
    ...     dispatcher.target.startswith("tcp://127.0.0.1:")
    True
    """

    def __init__(
        self, config: DispatcherConfig | None = None, start: bool = True
    ) -> None:
        if config is None:
            config = DispatcherConfig()
        if not isinstance(config, DispatcherConfig):
            raise TypeError(f"config must be a DispatcherConfig, got {config!r}")
        self._loop = _DispatcherLoop(config)
        self._metrics: metrics.MetricsServer | None = None
        if start:
            self.start()

    @property
    def config(self) -> DispatcherConfig:
        """The configuration the server was built with."""
        return self._loop.config

    @property
    def target(self) -> str:
        """``"tcp://host:port"`` with the real port (also when ``port=0``)."""
        if not self._loop.endpoint:
            raise FailedPreconditionError("the dispatcher has no address until start()")
        return self._loop.endpoint

    def start(self) -> None:
        """Binds and starts serving (no-op if already started)."""
        self._loop.start()
        port = self.config.metrics_port
        if port is not None and self._metrics is None:
            host = self.config.host if self.config.protocol == "tcp" else "127.0.0.1"
            loop = self._loop
            try:
                self._metrics = metrics.MetricsServer(
                    "dispatcher",
                    host,
                    port,
                    lambda: _collect(
                        loop.state,
                        loop.journal,
                        loop.scraped_status.get(SCRAPE_STATUS_TIMEOUT_S),
                    ),
                )
            except BaseException:
                self._loop.stop()
                raise

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the Prometheus endpoint (None without ``metrics_port``)."""
        return None if self._metrics is None else self._metrics.address

    def stop(self) -> None:
        """Stops serving and frees the ports; idempotent."""
        if self._metrics is not None:
            self._metrics.stop()
        self._loop.stop()

    def join(self, timeout: float | None = None) -> None:
        """Blocks until ``stop()`` (or ``timeout``); raises if the server crashed."""
        self._loop.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._loop.endpoint or "not started"
        return f"<DispatchServer {where}>"


__all__ = ["DispatchServer"]
