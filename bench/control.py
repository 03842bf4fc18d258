"""The control plane at scale: fake peers on one real dispatcher; group commit.

    python bench/control.py                  # 1,000 workers + 1,000 consumers; journal
    python bench/control.py --quick          # 100 + 100, shorter windows
    python bench/control.py --only journal

Section ``control``: a real dispatcher (``zmqdata dispatcher``, its own
process) and fake peers speaking the real protocol from two driver processes
(one poller each; one DEALER per fake peer, a worker's with its own routing id
as real workers have, plus the DEALER its split requests use). Fake worker
``i`` and fake consumer ``i`` stand for one trainer host: the consumer reads a
DYNAMIC job with ``target_workers="LOCAL"`` in the worker's process, so each
fake worker runs one task and asks for its splits. Workers heartbeat every
1 s and consumers every 100 ms (the defaults), a worker asks for a split every
``--split-interval`` s, and meanwhile a real consumer reads a real dataset from
two real workers in its process. Reported: p50/p99 of a consumer heartbeat's
and a worker ``GetSplit``'s round trip, and the dispatcher's CPU seconds per
wall second.

Section ``journal``: a fault-tolerant dispatcher (journal on the real disk,
under the repository) and ``--requesters`` fake workers of one DYNAMIC
iteration asking for splits as fast as they are answered (one request in
flight each): splits/s, journal commits/s (the dispatcher's
``zmqdata_dispatcher_journal_commits`` metric: one write and fsync each), p50
and p99 latency; then the same with one sequential requester.

``state_costs(peers)``: microseconds per request in the dispatcher's state
alone (no sockets) with ``peers`` fake workers and consumers; reported with
``control``.

Figures are medians over ``--repeats`` windows, measured under
``flock /tmp/zmqdata-bench.lock``.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import multiprocessing
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zmq

import zmqdata as zd
from bench.common import ROOT, Bench, Stat, sizes_for, subprocess_env
from zmqdata import service
from zmqdata._wire import messages as m

DYNAMIC = 1
WORKER_HEARTBEAT_S = 1.0
"""``WorkerConfig.heartbeat_interval_ms`` default."""
CLIENT_HEARTBEAT_S = 0.1
"""``ZMQDATA_CLIENT_HEARTBEAT_MS`` default."""
FAKE_RANGE = 10**12
"""The fake peers' dataset: a range no split hand-out gets to the end of."""


@dataclass(frozen=True)
class ControlSizes:
    peers: int = 1_000
    """Fake workers, and as many fake consumers."""
    drivers: int = 2
    window_s: float = 10.0
    split_interval_s: float = 1.0
    requesters: int = 64
    journal_window_s: float = 5.0


QUICK = ControlSizes(peers=100, window_s=3.0, journal_window_s=2.0)


# ------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_fd_limit() -> int:
    """Raises this process's soft ``ulimit -n`` to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@contextmanager
def dispatcher_process(**settings: Any) -> Iterator[tuple[str, int]]:
    """``zmqdata dispatcher --config`` in its own process, as users start it.

    ``settings`` are ``DispatcherConfig`` fields; yields (target, pid).
    """
    port = _free_port()
    config = Path(tempfile.mkdtemp(prefix="zmqdata-bench-")) / "deploy.yaml"
    config.write_text(json.dumps({"dispatcher": {"port": port, **settings}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmqdata", "dispatcher", "--config", str(config)],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = f"tcp://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                service.get_status(target)
                break
            except zd.errors.ZmqDataError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the dispatcher did not start") from None
        yield target, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(config.parent, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")


# ------------------------------------------------------------------ fake peers


class _Peer:
    """One fake peer's DEALER and its request in flight."""

    __slots__ = ("index", "kind", "request_id", "sent", "sock")

    def __init__(self, sock: zmq.Socket[Any], kind: str, index: int) -> None:
        self.sock, self.kind, self.index = sock, kind, index
        self.request_id = 0
        self.sent: float | None = None


class Driver:
    """Fake workers and consumers ``indexes`` of one driver process, one poller.

    Only the sockets with a request in flight are polled; pushes to a worker
    (``ProcessTask``) are read with its next reply.
    """

    def __init__(self, target: str, indexes: range, dataset_id: str) -> None:
        self.target, self.indexes, self.dataset_id = target, indexes, dataset_id
        self.context = zmq.Context()
        self.context.set(zmq.MAX_SOCKETS, 8 * len(indexes) + 64)
        self.poller = zmq.Poller()
        self.by_socket: dict[zmq.Socket[Any], _Peer] = {}
        self.worker_ids: dict[int, int] = {}
        self.task_ids: dict[int, tuple[int, int]] = {}  # index -> (task, iteration)
        self.client_ids: dict[int, int] = {}
        self.control = {
            i: self._peer("worker", i, f"w-{uuid.uuid4().hex}") for i in indexes
        }
        self.splits = {i: self._peer("split", i) for i in indexes}
        self.consumers = {i: self._peer("consumer", i) for i in indexes}
        self.rtts: dict[str, list[float]] = {"worker": [], "split": [], "consumer": []}
        self.elements = dict.fromkeys(indexes, 0)

    def _peer(self, kind: str, index: int, routing_id: str | None = None) -> _Peer:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            sock.setsockopt(zmq.ROUTING_ID, routing_id.encode())
        sock.connect(self.target)
        peer = _Peer(sock, kind, index)
        self.by_socket[sock] = peer
        return peer

    def send(self, peer: _Peer, message: m.Message) -> None:
        peer.request_id += 1
        message = dataclasses.replace(message, request_id=peer.request_id)
        peer.sent = time.perf_counter()
        peer.sock.send(m.encode(message))
        self.poller.register(peer.sock, zmq.POLLIN)

    def poll(self, timeout_ms: float) -> list[tuple[_Peer, m.Message, float]]:
        """Replies to requests in flight (each matched by id), with their RTT."""
        out = []
        for sock, _ in self.poller.poll(math.ceil(timeout_ms)):
            peer = self.by_socket[sock]
            while True:
                try:
                    message = m.decode(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if isinstance(message, m.ProcessTask):
                    self._tasks(peer.index, message.tasks)
                elif peer.sent is not None and message.request_id == peer.request_id:
                    out.append((peer, message, time.perf_counter() - peer.sent))
                    peer.sent = None
                    self.poller.unregister(sock)
        return out

    def _tasks(self, index: int, tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            self.task_ids[index] = (task["task_id"], task["iteration_id"])

    def call_all(self, requests: dict[_Peer, m.Message]) -> dict[int, m.Message]:
        """Sends every request, waits for every reply; replies by peer index."""
        for peer, message in requests.items():
            self.send(peer, message)
        replies: dict[int, m.Message] = {}
        deadline = time.monotonic() + 120
        while len(replies) < len(requests):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(requests) - len(replies)} replies missing")
            for peer, message, _ in self.poll(100):
                if isinstance(message, m.Error):
                    raise RuntimeError(f"{peer.kind} {peer.index}: {message.message}")
                replies[peer.index] = message
        return replies

    def setup(self) -> None:
        """Registers the workers, then each consumer's job and iteration."""
        hosts = {i: f"fake-host-{i}-{uuid.uuid4().hex}" for i in self.indexes}
        registered = self.call_all(
            {
                self.control[i]: m.RegisterWorker(
                    worker_address=f"10.0.{i // 250}.{i % 250}:7000",
                    data_address=f"tcp://10.0.{i // 250}.{i % 250}:7000",
                    version=zd.__version__,
                    local_process=hosts[i],
                )
                for i in self.indexes
            }
        )
        for i, reply in registered.items():
            assert isinstance(reply, m.RegisterWorkerReply)
            self.worker_ids[i] = reply.worker_id
        jobs = self.call_all(
            {
                self.consumers[i]: m.GetOrCreateJob(
                    dataset_id=self.dataset_id,
                    processing_mode=DYNAMIC,
                    target_workers="LOCAL",
                    local_process=hosts[i],
                )
                for i in self.indexes
            }
        )
        states = self.call_all(
            {
                self.consumers[i]: m.GetOrCreateIteration(
                    job_id=jobs[i].job_id,  # type: ignore[attr-defined]
                    repetition=0,
                )
                for i in self.indexes
            }
        )
        for i, state in states.items():
            assert isinstance(state, m.IterationState)
            self.client_ids[i] = state.client_id
        # The pushed ProcessTask waits on each worker's socket: a heartbeat reads it.
        self.call_all({self.control[i]: self._heartbeat(i) for i in self.indexes})
        missing = [i for i in self.indexes if i not in self.task_ids]
        if missing:
            raise RuntimeError(f"{len(missing)} fake workers got no task")

    def _heartbeat(self, index: int) -> m.WorkerHeartbeat:
        """What a real worker with one running task reports."""
        tasks = []
        if index in self.task_ids:
            tasks = [[self.task_ids[index][0], False]]
        elements = self.elements[index]
        task_stats = [
            {
                "task_id": task_id,
                "elements": elements,
                "bytes": elements * 8,
                "requests": elements // 16,
                "buffered_elements": 16,
                "buffered_bytes": 128,
                "finished": False,
            }
            for task_id, _ in tasks
        ]
        stats = {
            "elements": elements,
            "bytes": elements * 8,
            "requests": elements // 16,
            "buffered_elements": 16,
            "buffered_bytes": 128,
            "tasks_running": len(tasks),
            "tasks_finished": 0,
            "tasks": task_stats,
        }
        return m.WorkerHeartbeat(
            worker_id=self.worker_ids[index], tasks=tasks, stats=stats
        )

    def window(self, seconds: float, split_interval_s: float) -> dict[str, list[float]]:
        """Every peer at its interval (random phases) for ``seconds``; the RTTs."""
        for samples in self.rtts.values():
            samples.clear()
        now = time.perf_counter()
        due: list[tuple[float, int, str]] = []
        for i in self.indexes:
            due.append((now + random.uniform(0, WORKER_HEARTBEAT_S), i, "worker"))
            due.append((now + random.uniform(0, CLIENT_HEARTBEAT_S), i, "consumer"))
            due.append((now + random.uniform(0, split_interval_s), i, "split"))
        heapq.heapify(due)
        intervals = {
            "worker": WORKER_HEARTBEAT_S,
            "consumer": CLIENT_HEARTBEAT_S,
            "split": split_interval_s,
        }
        end = now + seconds
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            while due and due[0][0] <= now:
                at, i, kind = heapq.heappop(due)
                heapq.heappush(due, (at + intervals[kind], i, kind))
                self._request(i, kind)
            wait = max(0.0, min(due[0][0], end) - time.perf_counter())
            for peer, message, rtt in self.poll(wait * 1000):
                if isinstance(message, m.Error):
                    raise RuntimeError(f"{peer.kind} {peer.index}: {message.message}")
                self.rtts[peer.kind].append(rtt)
        self._drain()
        return self.rtts

    def _request(self, index: int, kind: str) -> None:
        """One request of ``kind``; skipped while the peer's last one is in flight
        (a real peer waits for its reply too)."""
        message: m.Message
        if kind == "worker":
            peer, message = self.control[index], self._heartbeat(index)
        elif kind == "consumer":
            peer = self.consumers[index]
            message = m.ClientHeartbeat(client_id=self.client_ids[index])
        else:
            task_id, iteration_id = self.task_ids[index]
            peer = self.splits[index]
            message = m.GetSplit(
                iteration_id=iteration_id, repetition=0, task_id=task_id
            )
            self.elements[index] += 256
        if peer.sent is None:
            self.send(peer, message)

    def _drain(self) -> None:
        """Waits for the requests in flight (their RTTs count)."""
        deadline = time.perf_counter() + 30
        while any(p.sent is not None for p in self.by_socket.values()):
            if time.perf_counter() > deadline:
                raise RuntimeError("replies missing at the end of a window")
            for peer, _, rtt in self.poll(100):
                self.rtts[peer.kind].append(rtt)

    def close(self) -> None:
        for sock in self.by_socket:
            sock.close(linger=0)
        self.context.term()


def _drive(
    target: str,
    indexes: range,
    dataset_id: str,
    sizes: ControlSizes,
    conn: Any,
) -> None:
    """A driver process: set up, then one window per ``"go"`` from the parent."""
    raise_fd_limit()
    driver = Driver(target, indexes, dataset_id)
    try:
        driver.setup()
        conn.send("ready")
        while conn.recv() == "go":
            rtts = driver.window(sizes.window_s, sizes.split_interval_s)
            conn.send({kind: list(samples) for kind, samples in rtts.items()})
    except BaseException as error:
        conn.send(error)
        raise
    finally:
        driver.close()


_REAL_CONSUMER = """
import sys, threading, time
import zmqdata as zd
from zmqdata import service
workers = [service.WorkerServer(service.WorkerConfig(sys.argv[1])) for _ in range(2)]
ds = zd.Dataset.range(20_000).map(lambda x: x * 2).apply(service.distribute(
    "distributed_epoch", sys.argv[1], target_workers="LOCAL"))
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
count, start = 0, time.perf_counter()
while not stop.is_set():
    for _ in ds:
        count += 1
elapsed = time.perf_counter() - start
for worker in workers:
    worker.stop()
print(count / elapsed, flush=True)
"""


def control(bench: Bench, sizes: ControlSizes | None = None) -> dict[str, Any]:
    """1,000 fake workers and consumers on one dispatcher, a real consumer reading."""
    sizes = sizes or (QUICK if bench.quick else ControlSizes())
    raise_fd_limit()  # the dispatcher process inherits it
    spawn = multiprocessing.get_context("spawn")
    with dispatcher_process() as (target, pid):
        pipeline = zd.Dataset.range(FAKE_RANGE)
        dataset_id = service.register_dataset(target, pipeline, compression=None)
        per = -(-sizes.peers // sizes.drivers)
        drivers = []
        for start in range(0, sizes.peers, per):
            parent, child = spawn.Pipe()
            indexes = range(start, min(sizes.peers, start + per))
            proc = spawn.Process(
                target=_drive, args=(target, indexes, dataset_id, sizes, child)
            )
            proc.start()
            drivers.append((proc, parent))
        try:
            for _, conn in drivers:
                _expect(conn, "ready")
            consumer = subprocess.Popen(
                [sys.executable, "-c", _REAL_CONSUMER, target],
                env=subprocess_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert consumer.stdin is not None
            assert consumer.stdout is not None
            if consumer.stdout.readline().strip() != "ready":
                raise RuntimeError("the real consumer did not start")
            windows = [_window(drivers, pid) for _ in range(bench.repeats + 1)][1:]
            for _, conn in drivers:
                conn.send("stop")
            consumer.stdin.close()
            real_rate = float(consumer.stdout.readline())
            consumer.wait(60)
        finally:
            for proc, _ in drivers:
                proc.join(60)
                if proc.is_alive():
                    proc.kill()
    costs = [state_costs(sizes.peers) for _ in range(bench.repeats)]
    return {
        "peers": sizes.peers,
        "split_interval_s": sizes.split_interval_s,
        "state": {key: Stat(c[key] for c in costs) for key in costs[0]},
        "real_consumer_elements_per_s": real_rate,
        **{key: Stat(w[key] for w in windows) for key in windows[0]},
    }


def _expect(conn: Any, what: str) -> Any:
    got = conn.recv()
    if isinstance(got, BaseException):
        raise RuntimeError(f"a driver failed: {got!r}")
    if what and got != what:
        raise RuntimeError(f"a driver said {got!r}")
    return got


def _window(drivers: list[tuple[Any, Any]], pid: int) -> dict[str, float]:
    """One measurement window of every driver: latencies (ms) and dispatcher CPU."""
    cpu, start = cpu_seconds(pid), time.perf_counter()
    for _, conn in drivers:
        conn.send("go")
    rtts: dict[str, list[float]] = {}
    for _, conn in drivers:
        for kind, samples in _expect(conn, "").items():
            rtts.setdefault(kind, []).extend(samples)
    elapsed = time.perf_counter() - start
    out = {"dispatcher_cpu": (cpu_seconds(pid) - cpu) / elapsed}
    for kind, samples in rtts.items():
        out[f"{kind}_p50_ms"] = percentile(samples, 50) * 1000
        out[f"{kind}_p99_ms"] = percentile(samples, 99) * 1000
        out[f"{kind}_per_s"] = len(samples) / elapsed
    return out


# ------------------------------------------------------------------ per request


def state_costs(peers: int, calls: int = 2_000) -> dict[str, float]:
    """Microseconds per request the dispatcher's state spends, no sockets.

    ``peers`` fake workers and LOCAL consumers (as in ``control``); a
    request's cost should not grow with ``peers``.
    """
    from zmqdata._config import DispatcherConfig
    from zmqdata._dataset import graph
    from zmqdata._dispatcher.state import DispatcherState

    state = DispatcherState(DispatcherConfig())

    def call(peer: bytes, request: m.Message) -> Any:
        """The reply to ``request`` (what else it sends is dropped)."""
        return state.handle(peer, request, 0.0)[0][1]

    pipeline = graph.serialize(zd.Dataset.range(FAKE_RANGE)._node)
    dataset = call(b"c", m.GetOrRegisterDataset(pipeline=pipeline))
    workers, clients, tasks = [], [], []
    for i in range(peers):
        address = f"10.0.{i // 250}.{i % 250}:7000"
        register = m.RegisterWorker(
            worker_address=address,
            data_address=f"tcp://{address}",
            local_process=f"p{i}",
        )
        workers.append(call(f"w{i}".encode(), register).worker_id)
    start = time.perf_counter()
    for i in range(peers):
        job = m.GetOrCreateJob(
            dataset_id=dataset.dataset_id,
            processing_mode=DYNAMIC,
            target_workers="LOCAL",
            local_process=f"p{i}",
        )
        begin = m.GetOrCreateIteration(job_id=call(b"c", job).job_id, repetition=0)
        iteration = call(b"c", begin)
        clients.append(iteration.client_id)
        tasks.append((iteration.tasks[0]["task_id"], iteration.iteration_id))
    joined_us = (time.perf_counter() - start) / peers * 1e6
    picks = [random.randrange(peers) for _ in range(calls)]

    def per_call(make: Any) -> float:
        requests = [make(i, n) for n, i in enumerate(picks)]
        start = time.perf_counter()
        for peer, request in requests:
            state.handle(peer, request, 1.0)
        return (time.perf_counter() - start) / calls * 1e6

    def heartbeat(i: int, n: int) -> tuple[bytes, m.Message]:
        task = [[tasks[i][0], False]]
        return f"w{i}".encode(), m.WorkerHeartbeat(worker_id=workers[i], tasks=task)

    def split(i: int, n: int) -> tuple[bytes, m.Message]:
        request = m.GetSplit(
            request_id=n + 1,
            iteration_id=tasks[i][1],
            repetition=0,
            task_id=tasks[i][0],
        )
        return f"w{i}".encode(), request

    out = {
        "job_and_iteration_us": joined_us,
        "worker_heartbeat_us": per_call(heartbeat),
        "client_heartbeat_us": per_call(
            lambda i, n: (b"c", m.ClientHeartbeat(client_id=clients[i]))
        ),
        "get_split_us": per_call(split),
    }
    start = time.perf_counter()
    for n in range(calls):
        state.tick(1.0 + n * 0.1 / calls)
    out["tick_us"] = (time.perf_counter() - start) / calls * 1e6
    return out


# ------------------------------------------------------------------ journal


def _split_requester(
    target: str, iteration_id: int, task_ids: list[int], seconds: float, conn: Any
) -> None:
    """Fake workers ``task_ids`` asking for splits back to back, one in flight each."""
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, 4 * len(task_ids) + 64)
    peers: dict[zmq.Socket[Any], list[Any]] = {}
    poller = zmq.Poller()
    for task_id in task_ids:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(target)
        poller.register(sock, zmq.POLLIN)
        peers[sock] = [task_id, 0, 0.0]
    latencies: list[float] = []
    splits = 0

    def ask(sock: zmq.Socket[Any]) -> None:
        state = peers[sock]
        state[1] += 1
        state[2] = time.perf_counter()
        request = m.GetSplit(
            request_id=state[1],
            iteration_id=iteration_id,
            repetition=0,
            task_id=state[0],
        )
        sock.send(m.encode(request))

    conn.recv()  # start together
    end = time.perf_counter() + seconds
    for sock in peers:
        ask(sock)
    in_flight = len(peers)
    while in_flight:
        for sock, _ in poller.poll(1000):
            reply = m.decode(sock.recv())
            if not isinstance(reply, m.GetSplitReply) or not reply.splits:
                raise RuntimeError(f"unexpected reply {reply!r}")
            latencies.append(time.perf_counter() - peers[sock][2])
            splits += 1
            if time.perf_counter() < end:
                ask(sock)
            else:
                in_flight -= 1
    for sock in peers:
        sock.close(linger=0)
    context.term()
    conn.send((splits, latencies))


def _commits(metrics_port: int) -> float:
    """The dispatcher's journal commits so far (one write and fsync each).

    NaN from a dispatcher that does not count them (before group commit).
    """
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("zmqdata_dispatcher_journal_commits"):
                return float(line.split()[-1])
    return float("nan")


def _journal_run(requesters: int, seconds: float, procs: int) -> dict[str, float]:
    """One fault-tolerant dispatcher, a fresh journal on disk, one timed run."""
    work_dir = tempfile.mkdtemp(prefix="zmqdata-bench-journal-", dir=ROOT)
    metrics_port = _free_port()
    settings = {
        "fault_tolerant_mode": True,
        "work_dir": work_dir,
        "metrics_port": metrics_port,
    }
    try:
        with dispatcher_process(**settings) as (target, pid):
            iteration_id, task_ids = _dynamic_iteration(target, requesters)
            spawn = multiprocessing.get_context("spawn")
            per = -(-requesters // procs)
            runs = []
            for start in range(0, requesters, per):
                parent, child = spawn.Pipe()
                proc = spawn.Process(
                    target=_split_requester,
                    args=(
                        target,
                        iteration_id,
                        task_ids[start : start + per],
                        seconds,
                        child,
                    ),
                )
                proc.start()
                runs.append((proc, parent))
            time.sleep(1.0)  # the requesters' sockets connect
            writes, cpu = _commits(metrics_port), cpu_seconds(pid)
            begin = time.perf_counter()
            for _, conn in runs:
                conn.send("go")
            splits, latencies = 0, []
            for proc, conn in runs:
                got, samples = conn.recv()
                splits += got
                latencies += samples
                proc.join(30)
            elapsed = time.perf_counter() - begin
            writes = _commits(metrics_port) - writes
            cpu = cpu_seconds(pid) - cpu
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return {
        "splits_per_s": splits / elapsed,
        "commits_per_s": writes / elapsed,
        "splits_per_commit": splits / writes if writes > 0 else float("nan"),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "dispatcher_cpu": cpu / elapsed,
    }


def _dynamic_iteration(target: str, workers: int) -> tuple[int, list[int]]:
    """A DYNAMIC iteration over a large range with a task on each of ``workers``
    fake workers; (iteration id, task ids)."""
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, workers + 64)
    socks = []
    try:
        for _ in range(workers):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, f"w-{uuid.uuid4().hex}".encode())
            sock.connect(target)
            socks.append(sock)
        for i, sock in enumerate(socks):
            address = f"10.0.{i // 250}.{i % 250}:7000"
            register = m.RegisterWorker(
                request_id=1, worker_address=address, data_address=f"tcp://{address}"
            )
            sock.send(m.encode(register))
            m.decode(sock.recv())
        dataset_id = service.register_dataset(
            target, zd.Dataset.range(FAKE_RANGE), compression=None
        )
        client = socks[0].context.socket(zmq.DEALER)
        socks.append(client)
        client.connect(target)
        client.send(
            m.encode(m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC))
        )
        job = m.decode(client.recv())
        client.send(m.encode(m.GetOrCreateIteration(job_id=job.job_id, repetition=0)))  # type: ignore[attr-defined]
        state = m.decode(client.recv())
        assert isinstance(state, m.IterationState), state
        task_ids = [task["task_id"] for task in state.tasks]
        return state.iteration_id, task_ids
    finally:
        for sock in socks:
            sock.close(linger=0)
        context.term()


def journal(bench: Bench, sizes: ControlSizes | None = None) -> dict[str, Any]:
    """Fault-tolerant split hand-out: many concurrent requesters, and one."""
    sizes = sizes or (QUICK if bench.quick else ControlSizes())
    out: dict[str, Any] = {}
    for name, requesters, procs in (
        ("concurrent", sizes.requesters, 2),
        ("sequential", 1, 1),
    ):
        runs = [
            _journal_run(requesters, sizes.journal_window_s, procs)
            for _ in range(bench.repeats)
        ]
        out[name] = {"requesters": requesters}
        out[name].update({key: Stat(run[key] for run in runs) for key in runs[0]})
    return out


# ------------------------------------------------------------------ main

SECTIONS = {"control": control, "journal": journal}


def table(results: dict[str, Any]) -> str:
    """Markdown rows of the figures."""
    lines = ["| figure | median |", "|---|---|"]

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}{key}.", item)
        else:
            lines.append(f"| {prefix.rstrip('.')} | {float(value):,.2f} |")

    walk("", results)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--peers", type=int, default=None)
    parser.add_argument("--requesters", type=int, default=None)
    parser.add_argument("--split-interval", type=float, default=None)
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(SECTIONS),
    )
    parser.add_argument("--out", type=Path, default=None, help="results JSON")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else ControlSizes()
    changes = {
        key: value
        for key, value in (
            ("peers", args.peers),
            ("requesters", args.requesters),
            ("split_interval_s", args.split_interval),
        )
        if value is not None
    }
    sizes = ControlSizes(**{**sizes.__dict__, **changes})
    bench = Bench(
        sizes_for(args.quick), args.repeats or (2 if args.quick else 3), args.quick
    )
    results = {}
    for name in args.only:
        start = time.perf_counter()
        print(f"{name} ...", end=" ", file=sys.stderr, flush=True)
        results[name] = SECTIONS[name](bench, sizes)
        print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print(table(results))
    if args.out is not None:
        from bench.run import jsonable

        args.out.write_text(json.dumps(jsonable(results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
