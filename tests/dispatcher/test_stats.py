"""Worker stats, throughput and dispatcher counters: metrics, never events."""

from __future__ import annotations

from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.splits import next_split_request
from tests.dispatcher.test_replay import RecordingState
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

OFF, DYNAMIC = 0, 1


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(DispatcherConfig(worker_timeout_ms=1_000))


def one(state: DispatcherState, message: m.Message, peer: bytes, now: float) -> Any:
    [answer] = [msg for to, msg in state.handle(peer, message, now) if to == peer]
    return answer


def register(state: DispatcherState, name: str = "h:1") -> int:
    message = m.RegisterWorker(worker_address=name, data_address=f"tcp://{name}")
    worker_id: int = one(state, message, name.encode(), 0.0).worker_id
    return worker_id


def beat(
    state: DispatcherState, worker_id: int, stats: dict[str, Any], now: float
) -> Any:
    message = m.WorkerHeartbeat(worker_id=worker_id, stats=stats)
    return one(state, message, b"h:1", now)


def worker_status(state: DispatcherState) -> dict[str, Any]:
    [worker] = state.status()["workers"]
    return worker


def test_heartbeat_stats_show_in_status_without_events(state):
    worker_id = register(state)
    logged = len(state.log)
    stats = {"elements": 10, "bytes": 80, "requests": 2, "errors": 0, "tasks": []}
    answer = beat(state, worker_id, stats, now=1.0)
    assert isinstance(answer, m.WorkerHeartbeatReply)
    assert len(state.log) == logged  # liveness-like data: no event
    assert worker_status(state)["stats"] == stats
    assert worker_status(state)["elements_per_s"] == 0.0  # one sample: no rate yet


def test_elements_per_s_comes_from_successive_heartbeats(state):
    worker_id = register(state)
    beat(state, worker_id, {"elements": 100}, now=1.0)
    beat(state, worker_id, {"elements": 300}, now=1.5)
    assert worker_status(state)["elements_per_s"] == pytest.approx(400.0)
    beat(state, worker_id, {"elements": 300}, now=2.5)
    assert worker_status(state)["elements_per_s"] == 0.0
    beat(state, worker_id, {}, now=3.0)  # a worker that reports no counters
    assert worker_status(state)["elements_per_s"] == 0.0


def test_a_worker_without_heartbeats_has_empty_stats(state):
    register(state)
    assert worker_status(state)["stats"] == {}
    assert worker_status(state)["elements_per_s"] == 0.0


def test_stats_of_a_removed_worker_are_dropped(state):
    worker_id = register(state)
    beat(state, worker_id, {"elements": 1}, now=0.5)
    state.tick(now=5.0)
    assert state.records.workers == {}
    assert state.worker_samples == {}


def test_replay_ignores_worker_stats(state):
    worker_id = register(state)
    beat(state, worker_id, {"elements": 1}, now=0.5)
    fresh = DispatcherState(DispatcherConfig())
    for event in state.log:
        fresh.apply(event)
    assert fresh.worker_samples == {}
    assert fresh.records.workers.keys() == state.records.workers.keys()


def test_dispatcher_counts_requests_errors_and_splits(state):
    register(state)
    data = graph.serialize(zd.Dataset.range(1_024)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=data), b"c", 0.0).dataset_id
    job_message = m.GetOrCreateJob(dataset_id=dataset, processing_mode=DYNAMIC)
    job = one(state, job_message, b"c", 0.0).job_id
    iteration = one(
        state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.0
    ).iteration_id
    requests, errors = state.requests_total, state.errors_total
    for _ in range(3):
        split = next_split_request(state, iteration)
        assert isinstance(one(state, split, b"h:1", 0.1), m.GetSplitReply)
    assert isinstance(
        one(state, m.GetSplit(iteration_id=999, repetition=0), b"h:1", 0.1), m.Error
    )
    assert state.splits_total == 3
    assert state.requests_total == requests + 4
    assert state.errors_total == errors + 1
    [job_status] = state.status()["jobs"]
    assert job_status["splits"] == {"handed_out": 3, "total": 64}


def test_jobs_without_dynamic_splits_show_no_split_progress(state):
    data = graph.serialize(zd.Dataset.range(10)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=data), b"c", 0.0).dataset_id
    one(state, m.GetOrCreateJob(dataset_id=dataset, processing_mode=OFF), b"c", 0.0)
    [job_status] = state.status()["jobs"]
    assert "splits" not in job_status


def test_heartbeat_age_interval_and_rates_are_measured_with_the_dispatchers_clock():
    state = DispatcherState(DispatcherConfig(worker_timeout_ms=10_000), now=0.25)
    worker_id = register(state)
    assert worker_status(state)["heartbeat_age_s"] is None  # no clock: no age
    beat(state, worker_id, {"elements": 10, "bytes": 1_000}, now=1.0)
    beat(state, worker_id, {"elements": 30, "bytes": 5_000}, now=1.5)
    shown = state.status(now=4.0)
    [worker] = shown["workers"]
    assert worker["heartbeat_age_s"] == pytest.approx(2.5)
    assert worker["heartbeat_interval_s"] == pytest.approx(0.5)
    assert worker["bytes_per_s"] == pytest.approx(8_000.0)
    assert shown["uptime_s"] == pytest.approx(3.75)
    assert shown["worker_timeout_s"] == 10.0


def test_a_dynamic_job_has_its_rate_and_an_eta_from_its_split_progress(state):
    worker_id = register(state)
    data = graph.serialize(zd.Dataset.range(1_024)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=data), b"c", 0.0).dataset_id
    job_message = m.GetOrCreateJob(dataset_id=dataset, processing_mode=DYNAMIC)
    job = one(state, job_message, b"c", 0.0).job_id
    iteration = one(
        state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.0
    ).iteration_id
    for _ in range(16):  # a quarter of the 64 splits
        one(state, next_split_request(state, iteration), b"h:1", 0.1)
    [task_id] = state.records.tasks
    capacity = {"buffer_capacity_elements": 1024, "buffer_capacity_bytes": 64 * 2**20}
    tasks = [
        {"task_id": task_id, "elements": 100, **capacity},
        {"task_id": 999, "elements": 5},  # no capacity: an older worker, or odd
        "odd",
    ]
    stats = {"buffered_elements": 8, "buffered_bytes": 64, "tasks": tasks}
    beat(state, worker_id, stats, now=1.0)
    stats["tasks"] = [{"task_id": task_id, "elements": 300, **capacity}]
    beat(state, worker_id, stats, now=1.5)
    [job_status] = state.status()["jobs"]
    assert job_status["splits"] == {"handed_out": 16, "total": 64}
    assert job_status["elements"] == 300
    assert job_status["elements_per_s"] == pytest.approx(400.0)
    assert job_status["eta_s"] == pytest.approx(300 * 3 / 400)  # 3x as much left
    assert worker_status(state)["buffer"] == {
        "elements": 8,
        "bytes": 64,
        "capacity_elements": 1024,
        "capacity_bytes": 64 * 2**20,
    }


def test_errors_ignored_add_up_per_job_and_outlive_their_tasks(state, monkeypatch):
    worker_id = register(state)
    data = graph.serialize(zd.Dataset.range(64)._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=data), b"c", 0.0).dataset_id
    job_message = m.GetOrCreateJob(
        dataset_id=dataset, processing_mode=DYNAMIC, job_name="named"
    )
    job = one(state, job_message, b"c", 0.0).job_id
    iteration = one(
        state, m.GetOrCreateIteration(job_id=job, repetition=0), b"c", 0.0
    ).iteration_id

    def ignoring(task_id: int, count: int, last: Any = "bad") -> dict[str, Any]:
        return {
            "task_id": task_id,
            "iteration_id": iteration,
            "errors_ignored": count,
            "last_error_ignored": last,
        }

    # Counts are the tasks' totals: a later report replaces an earlier one.
    beat(state, worker_id, {"tasks": [ignoring(7, 1), ignoring(8, 2)]}, now=1.0)
    beat(state, worker_id, {"tasks": [ignoring(7, 3, "x" * 10_000)]}, now=2.0)
    [job_status] = state.status()["jobs"]
    assert job_status["errors_ignored"] == 5  # task 8 finished and gone: still counted
    assert len(job_status["last_error_ignored"]) == 500
    # A lying worker cannot grow the table past its bound; odd entries are left out.
    monkeypatch.setattr("zmqdata._dispatcher.workers.MAX_TASKS_IGNORING", 3)
    lies = [ignoring(t, 1) for t in range(100, 110)]
    lies += [{"task_id": 1, "iteration_id": 999, "errors_ignored": 5}, "odd"]
    beat(state, worker_id, {"tasks": lies}, now=3.0)
    [job_status] = state.status()["jobs"]
    assert job_status["errors_ignored"] == 6
    assert len(state.ignored_errors[job]) == 3
