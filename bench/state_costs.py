"""Microseconds per request in the dispatcher's state alone (no sockets, no codec).

    python -c "from bench.state_costs import state_costs; print(state_costs(10_000))"

``bench/control.py`` reports it with each fleet size: a request's cost in the
state should not grow with the number of peers.
"""

from __future__ import annotations

import gc
import random
import time
from typing import Any

import zmqdata as zd
from bench.fleet import DYNAMIC, FAKE_RANGE
from zmqdata._wire import messages as m


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
        """Microseconds a call, Python's collector off: a daemon's dispatcher
        collects at its ticks (``_runtime/tuning.py``), not within a request."""
        requests = [make(i, n) for n, i in enumerate(picks)]
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            for peer, request in requests:
                state.handle(peer, request, 1.0)
            return (time.perf_counter() - start) / calls * 1e6
        finally:
            gc.enable()

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
