"""Snapshots: a state loaded from one equals the state it was taken from."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

import zmqdata as zd
from tests.dispatcher.test_exactly_once import CONFIG, mid_fence
from tests.dispatcher.test_replay import (
    RecordingState,
    collected_static_job,
    dynamic_and_off_jobs,
    one,
    tables,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m


def coordinated_job() -> RecordingState:
    """A live state: a coordinated-read job whose schedule changed mid-stream."""
    state = RecordingState(DispatcherConfig(worker_timeout_ms=1_000))
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    one(state, register, b"w1", 0.0)
    pipeline = graph.serialize(zd.Dataset.range(10).repeat()._node)
    dataset = one(state, m.GetOrRegisterDataset(pipeline=pipeline), b"c", 0.0)
    job_request = m.GetOrCreateJob(
        dataset_id=dataset.dataset_id, processing_mode=0, num_consumers=2, job_name="c"
    )
    job = one(state, job_request, b"c", 0.0).job_id
    for peer in (b"c", b"d"):
        one(state, m.GetOrCreateIteration(job_id=job, repetition=0), peer, 0.1)
    second = dataclasses.replace(register, worker_address="h:2")
    one(state, second, b"w2", 0.2)  # joins the schedule at the horizon
    return state


@pytest.mark.parametrize(
    "build",
    [
        lambda: dynamic_and_off_jobs()[0],
        lambda: collected_static_job()[0],
        coordinated_job,
        lambda: mid_fence(RecordingState(CONFIG)).state,
    ],
    ids=["dynamic-and-off", "collected-static", "coordinated", "exactly-once"],
)
def test_a_loaded_snapshot_equals_the_live_state(build):
    live = build()
    loaded = ClusterRecords()
    snapshot.load(loaded, snapshot.dump(live.records))
    assert tables(loaded) == tables(live.records)
    assert [w.peer for w in loaded.workers.values()] == [
        w.peer for w in live.records.workers.values()
    ]
    for (
        dataset_id,
        dataset,
    ) in live.records.datasets.items():  # nodes compare by identity
        assert repr(loaded.datasets[dataset_id].split_source) == repr(
            dataset.split_source
        )
    for iteration in loaded.iterations.values():  # tasks shared by both tables
        for task_id, task in iteration.tasks.items():
            assert loaded.tasks[task_id] is task


def test_the_coordinated_schedule_survives():
    live = coordinated_job()
    [iteration] = live.records.iterations.values()
    assert len(iteration.schedule) == 2
    assert iteration.horizon > 0
    loaded = ClusterRecords()
    snapshot.load(loaded, snapshot.dump(live.records))
    assert loaded.iterations[iteration.iteration_id].schedule == iteration.schedule
    assert loaded.iterations[iteration.iteration_id].horizon == iteration.horizon


def test_a_snapshot_of_0_1_with_liveness_in_its_records_loads():
    """0.1 kept when peers were last seen in the records; now beside them."""
    live, *_ = dynamic_and_off_jobs()
    body = msgpack.unpackb(snapshot.dump(live.records), strict_map_key=False)
    for row in (*body["workers"], *body["clients"]):
        row["last_seen"] = 12.5
    assert body["workers"]
    assert body["clients"]
    loaded = ClusterRecords()
    snapshot.load(loaded, msgpack.packb(body))
    assert tables(loaded) == tables(live.records)


def test_an_unknown_format_is_refused():
    data = snapshot.dump(ClusterRecords()).replace(b"\xa6format\x01", b"\xa6format\x09")
    with pytest.raises(ValueError, match="snapshot format 9"):
        snapshot.load(ClusterRecords(), data)
