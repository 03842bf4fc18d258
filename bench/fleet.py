"""Fake peers for the control-plane bench: thousands of workers and consumers
from one process, on three sockets, measuring themselves.

``Fleet`` speaks the real protocol (``zmqdata._wire.messages``) for fake
workers ``indexes`` and as many fake consumers:

* **workers** share one ROUTER with one connection each. The dispatcher tells
  workers apart by routing id, so every connection announces its own
  (``ROUTING_ID`` set before its ``connect``) and is named here by its index
  (``CONNECT_ROUTING_ID``): the dispatcher sees ``len(indexes)`` workers.
  Their heartbeats carry what a real worker with one busy task reports.
* **consumers' heartbeats and workers' split requests** share ``LINKS``
  connections each (one ROUTER each, as above): the dispatcher answers them
  by request id, not by peer.

Fake worker ``i`` and fake consumer ``i`` stand for one trainer host: the
consumer reads a DYNAMIC job with ``target_workers="LOCAL"`` served by the
worker, whose task takes ``split_interval_s`` per split and asks for enough
splits to last the period the dispatcher names (``GetSplitReply.period_ms``:
what a real worker's ``SplitBatch`` settles at while round trips are short;
fake workers start there, as a fleet that has run a while, not all at one
split a request in the same second). Workers and consumers pace their heartbeats as real ones do
(``_runtime/pace.py``: the base interval while something changes, longer while
nothing does; a quiet worker whose task asked for splits within its interval
skips its heartbeat, ``STRETCH`` intervals at most: ``_worker/control_core.py``).

The fleet measures itself, so a slow driver is never mistaken for a slow
dispatcher: every request is *due* at its peer's interval (random phases);
its *lag* is how late it left. A request due while its peer's last one is
unanswered is not sent (real peers would queue it; counted as ``skipped``).
``Window.behind`` says whether the driver kept its schedule; the bench shows
no latency from a window that did not.
"""

from __future__ import annotations

import gc
import math
import random
import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import zmq

import zmqdata as zd
from zmqdata._client.core import quiet_ceiling_s
from zmqdata._runtime import tuning
from zmqdata._runtime.pace import HeartbeatPace
from zmqdata._wire import messages as m
from zmqdata._worker.control_core import stretched_due
from zmqdata._worker.splitbatch import splits_lasting

DYNAMIC = 1
FAKE_RANGE = 10**12
"""The fake peers' dataset: a range no split hand-out gets to the end of."""
WORKER_HEARTBEAT_S = 1.0
"""``WorkerConfig.heartbeat_interval_ms``'s default: a worker's base interval."""
CLIENT_HEARTBEAT_S = 0.1
"""``ZMQDATA_CLIENT_HEARTBEAT_MS``'s default: a consumer's base interval."""
LAG_LIMIT_S = 0.005
"""A window whose p99 send lag is over this is ``behind``: a round trip the
driver measures may be late by its lag, a quarter of the 20 ms target."""
SENT_LIMIT = 0.99
"""A window that sent (or skipped as in flight) less than this share of what
was due is ``behind``."""
SETUP_TIMEOUT_S = 300.0
KINDS = ("worker", "consumer", "split")
SNDMORE, POLLIN = int(zmq.SNDMORE), int(zmq.POLLIN)
READ_EVERY = 32
"""Requests sent in a row at most before the replies in are read: a reply's
round trip is measured when it arrives, not after a burst of sends."""
LINKS = 64
"""Connections the fake consumers share (and as many their workers' split
requests): the dispatcher's ROUTER serves its connections in turn, so one
shared connection would be served as one peer among 10,000."""


@dataclass
class Window:
    """What one measurement window offered, sent, got back, and how late."""

    seconds: float
    due: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    rtts: dict[str, list[float]] = field(
        default_factory=lambda: {kind: [] for kind in KINDS}
    )
    lags: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    """The driver process's CPU seconds (its threads, ZeroMQ's included)."""

    def merge(self, other: Window) -> Window:
        """Both drivers' windows as one (same length)."""
        return Window(
            max(self.seconds, other.seconds),
            {k: self.due[k] + other.due[k] for k in KINDS},
            {k: self.skipped[k] + other.skipped[k] for k in KINDS},
            {k: self.rtts[k] + other.rtts[k] for k in KINDS},
            self.lags + other.lags,
            self.cpu_s + other.cpu_s,
        )

    @property
    def lag_p99_ms(self) -> float:
        return percentile(self.lags, 99) * 1000

    @property
    def sent_share(self) -> float:
        """Of the requests due, the share the driver sent or skipped in time."""
        due = sum(self.due.values())
        return 1.0 if due == 0 else len(self.lags) / due

    @property
    def behind(self) -> bool:
        """Whether the driver fell behind its schedule (latencies not valid)."""
        return self.lag_p99_ms > LAG_LIMIT_S * 1000 or self.sent_share < SENT_LIMIT

    @property
    def saturated(self) -> bool:
        """Whether replies came too late for some requests to go out (their peer
        still waited): the dispatcher served less than was offered."""
        due = sum(self.due.values())
        return due > 0 and sum(self.skipped.values()) > (1 - SENT_LIMIT) * due

    def figures(self) -> dict[str, float]:
        """Rates (per s), percentiles (ms) and the driver's own lag."""
        out: dict[str, float] = {
            "driver_lag_p99_ms": self.lag_p99_ms,
            "driver_sent_share": self.sent_share,
            "driver_behind": float(self.behind),
            "driver_cpu": self.cpu_s / self.seconds,
            "saturated": float(self.saturated),
        }
        for kind in KINDS:
            samples = self.rtts[kind]
            out[f"{kind}_offered_per_s"] = self.due[kind] / self.seconds
            out[f"{kind}_served_per_s"] = len(samples) / self.seconds
            out[f"{kind}_skipped_per_s"] = self.skipped[kind] / self.seconds
            out[f"{kind}_p50_ms"] = percentile(samples, 50) * 1000
            out[f"{kind}_p99_ms"] = percentile(samples, 99) * 1000
        return out


def percentile(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")


class Fleet:
    """Fake workers and consumers ``indexes`` of one driver process.

    ``setup()`` registers the workers and gives each consumer its job, its
    iteration and its worker's task; ``window(seconds)`` runs them all.
    """

    def __init__(
        self,
        target: str,
        indexes: range,
        dataset_id: str,
        split_interval_s: float = 1.0,
    ) -> None:
        self.target, self.indexes, self.dataset_id = target, indexes, dataset_id
        self.split_interval_s = split_interval_s
        self.context = zmq.Context()
        tuning.batch_io_threads(self.context)  # as the dispatcher's: fewer switches
        self.workers = self._socket(zmq.ROUTER)
        self.workers.setsockopt(zmq.ROUTER_MANDATORY, 1)
        run = uuid.uuid4().hex
        for i in indexes:
            self.workers.setsockopt(zmq.ROUTING_ID, f"w-{run}-{i}".encode())
            self.workers.setsockopt(zmq.CONNECT_ROUTING_ID, alias(i))
            self.workers.connect(target)
        self.consumers = self._links(f"c-{run}")
        self.splits = self._links(f"s-{run}")
        self.poller = zmq.Poller()
        for sock in (self.workers, self.consumers, self.splits):
            self.poller.register(sock, zmq.POLLIN)
        self._request_id = 0
        self._in_flight: dict[int, tuple[str, int, float]] = {}
        """Request id -> (kind, peer index, sent at)."""
        self._busy: set[tuple[str, int]] = set()
        self.worker_ids: dict[int, int] = {}
        self.tasks: dict[int, tuple[int, int]] = {}
        """Peer index -> (task id, iteration id) of its worker's task."""
        self.client_ids: dict[int, int] = {}
        self.revisions = dict.fromkeys(indexes, 0)
        """The iteration state revision each consumer holds."""
        self.paces = {i: HeartbeatPace(CLIENT_HEARTBEAT_S) for i in indexes}
        self.worker_paces = {i: HeartbeatPace(WORKER_HEARTBEAT_S) for i in indexes}
        self.elements = dict.fromkeys(indexes, 0)
        self.asked = dict.fromkeys(indexes, 1)
        """Splits each worker's task asked for last (they last it that long)."""
        self.last_sent = {kind: dict.fromkeys(indexes, 0.0) for kind in KINDS}

    def _links(self, name: str) -> zmq.Socket[Any]:
        """A ROUTER with ``LINKS`` connections, named by number (``_link``)."""
        sock = self._socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        for link in range(LINKS):
            sock.setsockopt(zmq.ROUTING_ID, f"{name}-{link}".encode())
            sock.setsockopt(zmq.CONNECT_ROUTING_ID, _link(link))
            sock.connect(self.target)
        return sock

    def _socket(self, kind: int) -> zmq.Socket[Any]:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        return sock

    # ------------------------------------------------------------ sending

    def _send(self, kind: str, index: int, message: m.Message | dict[str, Any]) -> None:
        """Sends a message (or, on the hot path, its map: cheaper to encode)."""
        self._request_id += 1
        if isinstance(message, dict):
            message["request_id"] = self._request_id
            data = msgpack.packb(message)
        else:
            message.request_id = self._request_id
            data = m.encode(message)
        if kind == "worker":
            self.workers.send(alias(index), SNDMORE)
            self.workers.send(data)
        else:
            sock = self.consumers if kind == "consumer" else self.splits
            sock.send(_link(index % LINKS), SNDMORE)
            sock.send(data)
        self._in_flight[self._request_id] = (kind, index, time.perf_counter())
        self._busy.add((kind, index))

    def _replies(
        self, timeout_ms: float
    ) -> Iterable[tuple[str, int, dict[str, Any], bytes, float]]:
        """Replies to requests in flight: (kind, index, map, bytes, rtt).

        Read as msgpack maps (``m.decode(bytes)`` where the message is needed).
        """
        ready = [self.workers, self.consumers, self.splits]
        if timeout_ms > 0:
            ready = [sock for sock, _ in self.poller.poll(math.ceil(timeout_ms))]
        for sock in ready:  # (EVENTS, not an exception, says when one is empty)
            while sock.get(zmq.EVENTS) & POLLIN:
                frames = [sock.recv(), sock.recv()]  # the dispatcher's: two frames
                received = time.perf_counter()
                body = msgpack.unpackb(frames[-1])
                if body["t"] == m.ProcessTask.TYPE:  # pushed to a worker
                    index = struct.unpack("<I", frames[0])[0]
                    for task in body["tasks"]:
                        self.tasks[index] = (task["task_id"], task["iteration_id"])
                    continue
                sent = self._in_flight.pop(body.get("request_id", 0), None)
                if sent is None:
                    continue  # a reply to a request given up on
                kind, index, at = sent
                self._busy.discard((kind, index))
                if body["t"] == m.Error.TYPE:
                    raise RuntimeError(f"{kind} {index}: {body.get('message')}")
                yield kind, index, body, frames[-1], received - at

    def _call_all(self, requests: dict[int, tuple[str, m.Message]]) -> dict[int, Any]:
        """Sends each peer's request, waits for every reply (sent again after 5 s)."""
        replies: dict[int, Any] = {}
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while len(replies) < len(requests):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(requests) - len(replies)} replies missing")
            for index, (kind, message) in requests.items():
                if index not in replies:
                    self._send(kind, index, message)
            resend_at = time.monotonic() + 5.0
            while len(replies) < len(requests) and time.monotonic() < resend_at:
                for _, index, _, data, _ in self._replies(100):
                    replies[index] = m.decode(data)
            self._in_flight.clear()
            self._busy.clear()
        return replies

    # ------------------------------------------------------------ setup

    def setup(self) -> None:
        """Registers the workers, then each consumer's job and iteration."""
        hosts = {i: f"fake-host-{i}-{uuid.uuid4().hex}" for i in self.indexes}
        registered = self._call_all(
            {
                i: (
                    "worker",
                    m.RegisterWorker(
                        worker_address=f"10.{i // 62500}.{i // 250 % 250}.{i % 250}:7000",
                        data_address=f"tcp://10.{i // 62500}.{i // 250 % 250}.{i % 250}:7000",
                        version=zd.__version__,
                        local_process=hosts[i],
                    ),
                )
                for i in self.indexes
            }
        )
        self.worker_ids = {i: reply.worker_id for i, reply in registered.items()}
        for i, reply in registered.items():
            self.worker_paces[i].set_ceiling(reply.heartbeat_max_ms / 1000 or None)
        jobs = self._call_all(
            {
                i: (
                    "consumer",
                    m.GetOrCreateJob(
                        dataset_id=self.dataset_id,
                        processing_mode=DYNAMIC,
                        target_workers="LOCAL",
                        local_process=hosts[i],
                    ),
                )
                for i in self.indexes
            }
        )
        states = self._call_all(
            {
                i: ("consumer", m.GetOrCreateIteration(job_id=job.job_id, repetition=0))
                for i, job in jobs.items()
            }
        )
        self.client_ids = {i: state.client_id for i, state in states.items()}
        self.revisions = {i: state.revision for i, state in states.items()}
        for i, state in states.items():  # as a reader: quiet up to 80% of it
            self.paces[i].set_ceiling(quiet_ceiling_s(state.fence_timeout_ms))
        # The fleet starts as one that has run a while (its trainers did not all
        # start in the same second): every peer at its quiet interval. Any reply
        # that changes something brings a peer back to its base, as it would.
        for pace in (*self.paces.values(), *self.worker_paces.values()):
            pace.interval = pace.max_s
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while len(self.tasks) < len(self.indexes):  # pushed: read with the replies
            if time.monotonic() > deadline:
                missing = len(self.indexes) - len(self.tasks)
                raise RuntimeError(f"{missing} fake workers got no task")
            for _ in self._replies(100):
                pass
        first = self._call_all(
            {i: ("split", self._request("split", i)) for i in self.indexes}
        )
        for i, reply in first.items():
            self._follow_period(i, reply.period_ms)

    # ------------------------------------------------------------ requests

    def heartbeat(self, index: int) -> dict[str, Any]:
        """What a real worker with one busy task reports, as a wire map.

        Its counters change at every heartbeat, so a real worker sends its
        stats whole (a delta would be most of them: ``_wire/deltas.py``).
        """
        task_id, iteration_id = self.tasks[index]
        elements = self.elements[index]
        served = {  # the worker's and its task's counters
            "elements": elements,
            "bytes": elements * 8,
            "requests": elements // 16,
            "errors": 0,
            "buffered_elements": 16,
            "buffered_bytes": 128,
        }
        task = {
            "task_id": task_id,
            "iteration_id": iteration_id,
            **served,
            "buffer_capacity_elements": 1024,
            "buffer_capacity_bytes": 2 << 20,
            "buffer_fill": 16 / 1024,
            "finished": False,
            "errors_ignored": 0,
            "last_error_ignored": "",
            "compressing": False,
            "compressed_elements": 0,
            "ops": [
                {
                    "op": "range",
                    "index": 0,
                    "own_s": elements * 1e-7,
                    "waited_s": 0.0,
                    "thread_s": 0.0,
                    "elements": elements,
                    "bytes": elements * 8,
                    "threads": None,
                    "busy": None,
                }
            ],
            "phases": {"encode": elements * 1e-8, "other": elements * 1e-8},
            "elapsed_s": elements * 1e-6,
        }
        stats = {
            "buffer_fill": task["buffer_fill"],
            **served,
            "tasks_running": 1,
            "tasks_finished": 0,
            "tasks": [task],
        }
        return {
            "v": m.PROTOCOL_VERSION,
            "t": m.WorkerHeartbeat.TYPE,
            "worker_id": self.worker_ids[index],
            "tasks": [[task_id, False]],
            "stats": stats,
        }

    def _request(self, kind: str, index: int) -> m.Message | dict[str, Any]:
        if kind == "worker":
            return self.heartbeat(index)
        if kind == "consumer":
            return {
                "v": m.PROTOCOL_VERSION,
                "t": m.ClientHeartbeat.TYPE,
                "client_id": self.client_ids[index],
                "known": self.revisions[index],
            }
        self.elements[index] += 256 * self.asked[index]
        task_id, iteration_id = self.tasks[index]
        return {
            "v": m.PROTOCOL_VERSION,
            "t": m.GetSplit.TYPE,
            "iteration_id": iteration_id,
            "repetition": 0,
            "task_id": task_id,
            "max_splits": self.asked[index],
        }

    def _interval(self, kind: str, index: int) -> float:
        if kind == "worker":
            return self.worker_paces[index].interval
        if kind == "consumer":
            return self.paces[index].interval
        return self.split_interval_s * self.asked[index]

    def _alive_by_splits(self, index: int, now: float) -> float | None:
        """When a quiet worker heartbeats instead, if its split requests let it wait."""
        due = stretched_due(
            self.worker_paces[index],
            self.last_sent["worker"][index],
            self.last_sent["split"][index],
        )
        return due if due is not None and due > now else None

    def _took_all(
        self,
        out: Window,
        replies: Iterable[tuple[str, int, dict[str, Any], bytes, float]],
    ) -> None:
        for kind, index, reply, _, rtt in replies:
            out.rtts[kind].append(rtt)
            self._took(kind, index, reply)

    def _took(self, kind: str, index: int, reply: dict[str, Any]) -> None:
        """A reply's effect on the peer (a consumer's pace, a worker's base)."""
        if kind == "consumer":
            self.revisions[index] = reply.get("revision", 0)
            self.paces[index].after(changed=not reply.get("unchanged", False))
        elif kind == "worker":
            news = reply.get("new_tasks") or reply.get("tasks_to_delete")
            news = news or reply.get("saves") or reply.get("trace")
            self.worker_paces[index].after(changed=bool(news))
        else:
            self._follow_period(index, reply.get("period_ms", 0))

    def _follow_period(self, index: int, period_ms: int) -> None:
        """Worker ``index`` asks for enough splits to last ``period_ms``."""
        self.asked[index] = splits_lasting(period_ms / 1000, self.split_interval_s)

    def window(self, seconds: float) -> Window:
        """Every peer at its interval (random phases) for ``seconds``.

        Python's cyclic garbage collector is off meanwhile (it took 12% of the
        driver's time): what a window makes is freed by reference counts.
        """
        gc.disable()
        try:
            return self._window(seconds)
        finally:
            gc.enable()

    def _window(self, seconds: float) -> Window:
        out = Window(seconds)
        cpu = time.process_time()
        start = time.perf_counter()
        schedule = Schedule()
        for i in self.indexes:
            for kind in KINDS:
                schedule.add(
                    start + random.uniform(0, self._interval(kind, i)), i, kind
                )
        end = start + seconds
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            for n, (at, i, kind) in enumerate(schedule.take(now), 1):
                if n % READ_EVERY == 0:
                    self._took_all(out, self._replies(0))
                later = self._alive_by_splits(i, now) if kind == "worker" else None
                if later is not None:
                    schedule.add(later, i, kind)
                    continue
                out.due[kind] += 1
                if (kind, i) in self._busy:
                    out.skipped[kind] += 1
                else:
                    self._send(kind, i, self._request(kind, i))
                    self.last_sent[kind][i] = now
                out.lags.append(time.perf_counter() - at)
                schedule.add(at + self._interval(kind, i), i, kind)
            wait_ms = max(
                0.0, (min(schedule.next_at(), end) - time.perf_counter()) * 1000
            )
            self._took_all(out, self._replies(wait_ms))
        out.cpu_s = time.process_time() - cpu
        self._drain(out)
        return out

    def _drain(self, out: Window) -> None:
        """Waits for the requests in flight (their round trips count)."""
        deadline = time.perf_counter() + 30
        while self._in_flight:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{len(self._in_flight)} replies missing")
            self._took_all(out, self._replies(100))

    def close(self) -> None:
        for sock in (self.workers, self.consumers, self.splits):
            sock.close(linger=0)
        self.context.term()


class Schedule:
    """Requests due, in 1 ms slots: constant time to add one and to take one.

    >>> schedule = Schedule()
    >>> schedule.add(1.0021, 7, "worker"); schedule.add(1.0005, 3, "split")
    >>> schedule.take(1.001), schedule.take(1.001), schedule.take(1.003)
    ([(1.0005, 3, 'split')], [], [(1.0021, 7, 'worker')])
    """

    SLOT_S = 0.001

    def __init__(self) -> None:
        self._slots: dict[int, list[tuple[float, int, str]]] = {}
        self._first: int | None = None
        """The earliest slot that may hold requests."""

    def add(self, at: float, index: int, kind: str) -> None:
        slot = int(at / self.SLOT_S)
        self._slots.setdefault(slot, []).append((at, index, kind))
        if self._first is None or slot < self._first:
            self._first = slot

    def take(self, now: float) -> list[tuple[float, int, str]]:
        """The requests due at ``now`` (removed), earliest slots first."""
        taken: list[tuple[float, int, str]] = []
        if self._first is None:
            return taken
        last = int(now / self.SLOT_S)
        slot = self._first
        while slot < last:
            taken += self._slots.pop(slot, ())
            slot += 1
        current = self._slots.get(last, [])
        taken += [item for item in current if item[0] <= now]
        rest = [item for item in current if item[0] > now]
        if rest:
            self._slots[last] = rest
        else:
            self._slots.pop(last, None)
        self._first = last if rest else (last + 1 if self._slots else None)
        return taken

    def next_at(self) -> float:
        """When the next request is due (inf: none)."""
        if not self._slots:
            return float("inf")
        if self._first not in self._slots:
            self._first = min(self._slots)
        return self._first * self.SLOT_S


def _link(link: int) -> bytes:
    """One of the connections consumers' (or split) requests share."""
    return struct.pack("<H", link)


def alias(index: int) -> bytes:
    """A fake worker's connection, named on the driver's ROUTER."""
    return struct.pack("<I", index)
