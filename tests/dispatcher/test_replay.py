"""Every state change is an event: replaying the events rebuilds the same state."""

from __future__ import annotations

import dataclasses
from typing import Any

import zmqdata as zd
from tests.dispatcher.splits import next_split_request
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.records import ClusterRecords, NoJournal
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

OFF, DYNAMIC = 0, 1


class RecordingSink(NoJournal):
    """Keeps every event in ``log``, as a journal would before applying it."""

    def __init__(self) -> None:
        self.log: list[ev.Event] = []

    def append(self, event: ev.Event) -> None:
        self.log.append(event)


class RecordingState(DispatcherState):
    """A state whose sink records its events (``log``)."""

    def __init__(self, config: DispatcherConfig) -> None:
        sink = RecordingSink()
        super().__init__(config, sink)
        self.log = sink.log


def tables(records: ClusterRecords) -> dict[str, Any]:
    """The state without its peers' connections and derived fields."""

    def plain(table: dict[Any, Any]) -> dict[Any, Any]:
        out = {}
        for key, record in table.items():
            fields = dataclasses.asdict(record)
            fields.pop("peer", None)
            fields.pop("split_source", None)
            out[key] = fields
        return out

    return {
        "workers": plain(records.workers),
        "datasets": plain(records.datasets),
        "jobs": plain(records.jobs),
        "iterations": plain(records.iterations),
        "tasks": plain(records.tasks),
        "clients": plain(records.clients),
        "named_jobs": dict(records.named_jobs),
        "collected_clients": dict(records.collected_clients),
        "created_by": dict(records.created_by),
        "by_fingerprint": dict(records.datasets_by_fingerprint),
        "next_id": records.next_id,
    }


def replayed_and_loaded(log: list[Any], records: ClusterRecords) -> ClusterRecords:
    """Asserts ``log`` replays, and a snapshot loads, to ``records``; the loaded copy."""
    replayed = ClusterRecords()
    for event in log:
        replayed.apply(event)
    assert tables(replayed) == tables(records)
    loaded = ClusterRecords()
    snapshot.load(loaded, snapshot.dump(records))
    assert tables(loaded) == tables(records)
    return loaded


def one(state: DispatcherState, message: m.Message, peer: bytes, now: float) -> Any:
    [answer] = [msg for to, msg in state.handle(peer, message, now) if to == peer]
    assert not isinstance(answer, m.Error), answer
    return answer


def dynamic_and_off_jobs() -> tuple[RecordingState, m.IterationState, m.IterationState]:
    """A live state: named DYNAMIC job with splits, a finished OFF job, a lost worker."""
    state = RecordingState(DispatcherConfig(worker_timeout_ms=1_000))
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    w1 = one(state, register, b"w1", 0.0).worker_id
    one(state, dataclasses.replace(register, worker_address="h:2"), b"w2", 0.0)
    pipeline = graph.serialize(zd.Dataset.range(1_000)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=pipeline), b"c", 0.1)
    one(state, m.GetOrRegisterDataset(pipeline=pipeline, dataset_id="mine"), b"c", 0.1)
    named = m.GetOrCreateJob(
        dataset_id=dataset.dataset_id, processing_mode=DYNAMIC, job_name="shared"
    )
    job = one(state, named, b"c", 0.2).job_id
    first = one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.3)
    one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"d", 0.3)
    for repetition in (0, 0, 1, 0):
        split = next_split_request(state, first.iteration_id, repetition)
        one(state, split, b"w1", 0.4)
    anonymous = m.GetOrCreateJob(dataset_id=dataset.dataset_id, processing_mode=OFF)
    other = one(state, anonymous, b"e", 0.5).job_id
    second = one(state, m.GetOrCreateIteration(job_id=other, repetition=0), b"e", 0.5)
    finished = [t["task_id"] for t in second.tasks]
    one(state, m.ClientHeartbeat(client_id=second.client_id, finished_tasks=finished),
        b"e", 0.6)  # fmt: skip
    one(state, m.ReleaseIterationClient(client_id=second.client_id), b"e", 0.7)
    one(state, m.WorkerHeartbeat(worker_id=w1), b"w1", 0.8)
    state.tick(now=1.5)  # worker 2 timed out (worker 1 heartbeated at 0.8)
    return state, first, second


def test_replaying_the_event_log_rebuilds_the_state():
    state, first, second = dynamic_and_off_jobs()
    assert {type(e) for e in state.log} == {
        ev.WorkerRegistered, ev.WorkerRemoved, ev.DatasetRegistered, ev.JobCreated,
        ev.IterationCreated, ev.TaskCreated, ev.TaskFinished, ev.SplitProduced,
        ev.ClientAcquired, ev.ClientReleased,
    }  # fmt: skip
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)
    # The finished, released unnamed job is forgotten; the named one stays.
    assert second.iteration_id not in state.records.iterations
    assert len(state.records.jobs) == 1
    assert state.records.iterations[first.iteration_id].split_repetition == 1


def collected_static_job() -> tuple[RecordingState, m.IterationState]:
    """A live state: indexed workers, a static-sharding job whose iteration was GC'ed."""
    config = DispatcherConfig(
        worker_addresses=("h:%port%", "h:%port%"),
        worker_timeout_ms=1_000,
        client_timeout_ms=500,
        job_gc_check_interval_ms=100,
        job_gc_timeout_ms=1_000,
    )
    state = RecordingState(config)
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    workers = {
        address: one(
            state, dataclasses.replace(register, worker_address=address), b"w", 0.0
        ).worker_id
        for address in ("h:1", "g:1", "h:2")
    }
    assert [w.index for w in state.records.workers.values()] == [0, None, 1]
    pipeline = graph.serialize(zd.Dataset.range(10)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=pipeline), b"c", 0.0)
    static = m.GetOrCreateJob(
        dataset_id=dataset.dataset_id,
        processing_mode=3,  # DATA
        job_name="static",
        target_workers="LOCAL",
    )
    job = one(state, static, b"c", 0.0).job_id
    first = one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.1)
    assert len(first.tasks) == 2  # g:1 is not in worker_addresses
    for now in (0.5, 1.0, 1.5, 2.0):  # the consumer is gone; workers stay
        for worker_id in workers.values():
            one(state, m.WorkerHeartbeat(worker_id=worker_id), b"w", now)
        state.tick(now=now)
    assert state.records.iterations[first.iteration_id].collected
    again = one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 2.1)
    assert again.iteration_id != first.iteration_id
    return state, first


def test_replay_rebuilds_worker_indices_and_collected_iterations():
    state, first = collected_static_job()
    assert {ev.IterationCollected, ev.ClientReleased} <= {type(e) for e in state.log}
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)
    assert replayed.collected_clients == {first.client_id: first.iteration_id}


def test_unnamed_jobs_are_forgotten_once_over_so_tables_stay_bounded():
    state = RecordingState(
        DispatcherConfig(
            worker_timeout_ms=10_000,
            client_timeout_ms=10_000,
            job_gc_check_interval_ms=100,
            job_gc_timeout_ms=1_000,
        )
    )
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    worker = one(state, register, b"w", 0.0).worker_id
    pipeline = graph.serialize(zd.Dataset.range(10)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=pipeline), b"c", 0.0)
    unnamed = m.GetOrCreateJob(dataset_id=dataset.dataset_id, processing_mode=OFF)
    for _ in range(50):  # read to the end, then leave
        job = one(state, unnamed, b"c", 0.1).job_id
        it = one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.1)
        done = [t["task_id"] for t in it.tasks]
        heartbeat = m.ClientHeartbeat(client_id=it.client_id, finished_tasks=done)
        one(state, heartbeat, b"c", 0.2)
        one(state, m.ReleaseIterationClient(client_id=it.client_id), b"c", 0.3)
    assert (state.records.jobs, state.records.iterations, state.records.tasks) == (
        {},
        {},
        {},
    )
    job = one(state, unnamed, b"c", 0.4).job_id  # left early: released at once
    it = one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.4)
    assert state.records.tasks
    one(state, m.ReleaseIterationClient(client_id=it.client_id), b"c", 0.5)
    assert (state.records.jobs, state.records.iterations, state.records.tasks) == (
        {},
        {},
        {},
    )
    job = one(state, unnamed, b"c", 0.6).job_id  # its consumer timed out
    one(state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.6)
    for now in (1.0, 6.0, 11.0):
        one(state, m.WorkerHeartbeat(worker_id=worker), b"w", now)
        state.tick(now=now)
    assert (state.records.jobs, state.records.iterations, state.records.tasks) == (
        {},
        {},
        {},
    )
    assert state.records.collected_clients == {}
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)
