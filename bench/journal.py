"""Group commit: fault-tolerant split hand-out with many requesters, and one.

    python bench/control.py --only journal

A fault-tolerant dispatcher (journal on the real disk, under the repository)
and ``requesters`` fake workers of one DYNAMIC iteration asking for splits as
fast as they are answered (one request in flight each): splits/s, journal
commits/s (the dispatcher's ``zmqdata_dispatcher_journal_commits`` metric: one
write and fsync each), p50 and p99 latency; then the same with one sequential
requester.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
import urllib.request
import uuid
from typing import Any

import zmq

import zmqdata as zd
from bench.common import ROOT, Bench, Stat
from bench.daemon import cpu_seconds, dispatcher_process, free_port
from bench.fleet import DYNAMIC, FAKE_RANGE, percentile
from zmqdata import service
from zmqdata._wire import messages as m


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
    metrics_port = free_port()
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


def journal(bench: Bench, requesters: int, seconds: float) -> dict[str, Any]:
    """Fault-tolerant split hand-out: ``requesters`` concurrent requesters, and one."""
    out: dict[str, Any] = {}
    for name, count, procs in (
        ("concurrent", requesters, 2),
        ("sequential", 1, 1),
    ):
        runs = [_journal_run(count, seconds, procs) for _ in range(bench.repeats)]
        out[name] = {"requesters": count}
        out[name].update({key: Stat(run[key] for run in runs) for key in runs[0]})
    return out


def table(results: dict[str, Any]) -> str:
    """Markdown rows of the journal's figures."""
    lines = ["| group commit | splits/s | fsyncs/s | p50 / p99 |", "|---|---|---|---|"]
    for name, run in results.items():
        lines.append(
            f"| {name}, {run['requesters']} requesters | {float(run['splits_per_s']):,.0f} "
            f"| {float(run['commits_per_s']):,.0f} "
            f"| {float(run['p50_ms']):.1f} / {float(run['p99_ms']):.1f} ms |"
        )
    return "\n".join(lines)
