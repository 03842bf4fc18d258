"""The dispatcher's indexes and timers: what keeps a request O(1) in the peers.

A heartbeat reads its worker's tasks from ``ClusterRecords.worker_tasks``, a
registration finds earlier workers at its address in ``workers_at``, and the
liveness tick scans only once a peer can have timed out. These tests check the
indexes always agree with the tables (also after a snapshot) and that a peer
times out at the same tick as with a scan at every tick.
"""

from __future__ import annotations

from typing import Any

import pytest

import zmqdata as zd
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m


def check_indexes(records: ClusterRecords) -> None:
    """The indexes hold exactly what the tables say (and every other invariant)."""
    records.validate()


def register(
    state: DispatcherState, peer: bytes, port: int, now: float, process: str = ""
) -> Any:
    address = f"h:{port}"
    request = m.RegisterWorker(
        worker_address=address, data_address=f"tcp://{address}", local_process=process
    )
    return state.handle(peer, request, now)[0][1]


def test_the_indexes_follow_every_change_and_a_snapshot():
    state = DispatcherState(DispatcherConfig(worker_timeout_ms=1_000))
    for i in range(3):
        register(state, f"w{i}".encode(), 7000 + i, 0.0, process=f"p{i % 2}")
    pipeline = graph.serialize(zd.Dataset.range(1_000)._node)
    [(_, dataset)] = state.handle(b"c", m.GetOrRegisterDataset(pipeline=pipeline), 0)
    clients = []
    for name in ("a", "b"):
        job = m.GetOrCreateJob(
            dataset_id=dataset.dataset_id, processing_mode=1, job_name=name
        )
        job_id = state.handle(b"c", job, 0.0)[0][1].job_id
        begin = m.GetOrCreateIteration(job_id=job_id, repetition=0)
        clients.append(state.handle(b"c", begin, 0.0)[0][1].client_id)
    assert len(state.records.tasks) == 6
    check_indexes(state.records)
    register(state, b"w0-again", 7000, 0.1)  # restarted: replaces worker 1
    check_indexes(state.records)
    assert len(state.records.workers_at["h:7000"]) == 1
    copy = ClusterRecords()
    snapshot.load(copy, snapshot.dump(state.records))
    check_indexes(copy)
    assert copy.worker_tasks.keys() == state.records.worker_tasks.keys()
    state.handle(b"c", m.ReleaseIterationClient(client_id=clients[0]), 0.2)
    state.tick(5.0)  # every worker timed out: their tasks go
    check_indexes(state.records)
    assert state.records.worker_tasks == {}
    assert state.records.workers_at == {}


def test_a_peer_times_out_at_the_first_tick_past_its_timeout():
    state = DispatcherState(
        DispatcherConfig(worker_timeout_ms=1_000, client_timeout_ms=60_000)
    )
    a = register(state, b"a", 7001, 0.0).worker_id
    b = register(state, b"b", 7002, 0.5).worker_id
    state.tick(0.1)
    heartbeat = m.WorkerHeartbeat(worker_id=a)
    for now in (0.9, 1.8):
        state.handle(b"a", heartbeat, now)
        state.tick(now)
        assert set(state.records.workers) == ({a, b} if now < 1.5 else {a})
    register(state, b"c", 7003, 1.9)
    for now in (2.0, 2.5, 2.8):
        state.tick(now)
        assert set(state.records.workers) == {a, register_id(state, 7003)}
    state.tick(2.81)  # a: last seen at 1.8
    assert set(state.records.workers) == {register_id(state, 7003)}
    state.tick(2.9)
    assert set(state.records.workers) == {register_id(state, 7003)}
    state.tick(2.91)  # c: registered at 1.9
    assert state.records.workers == {}


def register_id(state: DispatcherState, port: int) -> int:
    [worker_id] = state.records.workers_at[f"h:{port}"]
    return worker_id


def test_a_local_read_gives_tasks_to_the_workers_of_its_processes_only():
    state = DispatcherState(DispatcherConfig())
    ids = {
        (process, port): register(
            state, f"w{port}".encode(), port, 0.0, process
        ).worker_id
        for process, port in (("p0", 7001), ("p1", 7002), ("p0", 7003), ("p2", 7004))
    }
    pipeline = graph.serialize(zd.Dataset.range(1_000)._node)
    [(_, dataset)] = state.handle(b"c", m.GetOrRegisterDataset(pipeline=pipeline), 0)

    def read(process: str) -> None:
        job = m.GetOrCreateJob(
            dataset_id=dataset.dataset_id,
            processing_mode=1,
            job_name="local",
            target_workers="LOCAL",
            local_process=process,
        )
        job_id = state.handle(b"c", job, 0.0)[0][1].job_id
        state.handle(b"c", m.GetOrCreateIteration(job_id=job_id, repetition=0), 0.0)

    def served() -> list[int]:
        return sorted(task.worker_id for task in state.records.tasks.values())

    read("p0")
    assert served() == [ids["p0", 7001], ids["p0", 7003]]
    read("p1")  # joins: its process's worker gets a task too
    assert served() == [ids["p0", 7001], ids["p1", 7002], ids["p0", 7003]]
    check_indexes(state.records)


def test_validate_names_each_broken_invariant():
    state = DispatcherState(DispatcherConfig())
    register(state, b"w0", 7000, 0.0, process="p")
    records = state.records
    records.workers_at["h:9"] = {99}  # an index entry for no worker
    records.next_id = 1  # ids handed out again
    with pytest.raises(AssertionError, match=r"workers_at.*next_id"):
        records.validate()
    del records.workers_at["h:9"]
    records.next_id = 2
    records.validate()
