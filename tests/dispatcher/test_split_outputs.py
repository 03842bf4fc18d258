"""Exactly once by split outputs: the dispatcher's side (``_wire/outputs.py``).

An exactly-once job whose pipeline has a 1-to-many op keys the outputs of each
split, so its splits go out with the output keys to send (``[repetition, lo,
hi, first, end]``), a lost task's unacknowledged keys go out again as parts of
the splits they belong to, and a resumed read hands out only the outputs not
consumed. The bookkeeping around them is ``test_exactly_once.py``'s (source
keys, which the other exactly-once jobs keep). ``range(640).flat_map(...)``:
64 splits of 10 source elements.
"""

from __future__ import annotations

from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.test_exactly_once import CONFIG, RANGE_640, Read, state_of
from tests.dispatcher.test_replay import RecordingState, tables
from tests.dispatcher.test_state import (
    DYNAMIC,
    create_job,
    error,
    join,
    pipeline,
    register_dataset,
    register_worker,
    reply,
)
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m
from zmqdata._wire.outputs import OUTPUT_KEYS, PER_SPLIT, base

pytestmark = pytest.mark.timeout(30)

SPLITS = 64
FLAT_640 = pipeline(
    zd.Dataset.range(640).flat_map(lambda x: zd.Dataset.from_tensors(x).repeat(2))
)


def key(split: int, index: int = 0) -> int:
    """The output key of output ``index`` of split ``split`` (repetition 0)."""
    return base(0, split, SPLITS) + index


def start(state: RecordingState, clients: int = 1) -> Read:
    """Workers ``a:1`` and ``b:1`` and ``clients`` consumers of a named job."""
    for address in ("a:1", "b:1"):
        register_worker(state, address)
    dataset_id = register_dataset(state, FLAT_640)
    job_id = create_job(state, dataset_id, DYNAMIC, job_name="shared")
    assert state.records.jobs[job_id].split_outputs
    joined = [join(state, job_id) for _ in range(clients)]
    tasks = {t["worker_address"]: t["task_id"] for t in joined[0].tasks}
    return Read(state, joined[0].iteration_id, tasks, [j.client_id for j in joined], {})


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(CONFIG)


def test_a_split_goes_out_with_its_output_keys_unacknowledged(state):
    read = start(state)
    a = read.tasks["a:1"]
    assert read.ask(a, max_splits=2).splits == [
        [0, 0, 10, key(0), key(1)],
        [0, 10, 20, key(1), key(2)],
    ]
    assert read.unacked("a:1") == [key(0), key(2)]
    read.heartbeat(0, acked=[[a, key(0), key(0, 3)]])
    assert read.unacked("a:1") == [key(0, 3), key(2)]


def test_a_lost_task_hands_out_again_the_outputs_nobody_acknowledged(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=2)
    # 7 outputs of split 0, all of split 1 (its last output claims its tail)
    read.heartbeat(0, acked=[[a, key(0), key(0, 7), key(1), key(2)]])
    read.lose("a:1")
    told = state_of(read.heartbeat(0, task_epoch=0, now=1.6))
    read.heartbeat(0, task_epoch=told.task_epoch, now=1.7)  # the fence
    assert read.iteration.pending == [key(0, 7), key(1)]
    status = read.state.status()["jobs"][0]["lost_keys"]
    assert status == {"pending": 1, "orphaned": 0}  # splits, not keys
    assert read.ask(b).splits == [[0, 0, 10, key(0, 7), key(1)]]
    assert read.ask(b, again=True).splits == [[0, 0, 10, key(0, 7), key(1)]]
    assert read.ask(b).splits == [[0, 20, 30, key(2), key(3)]]
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)


def test_pending_keys_go_out_about_max_splits_splits_at_a_time(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=4)
    read.lose("a:1")
    told = state_of(read.heartbeat(0, task_epoch=0, now=1.6))
    read.heartbeat(0, task_epoch=told.task_epoch, now=1.7)
    first = read.ask(b, max_splits=3).splits
    assert [split[1:3] for split in first] == [[0, 10], [10, 20], [20, 30]]
    assert read.ask(b, max_splits=3).splits == [[0, 30, 40, key(3), key(4)]]


def resumed(state: RecordingState, consumed: list[int]) -> Read:
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, FLAT_640)
    job_id = create_job(state, dataset_id, DYNAMIC)
    joined = reply(
        state, m.GetOrCreateIteration(job_id=job_id, repetition=0, resume=consumed)
    )
    assert isinstance(joined, m.IterationState), joined
    tasks = {t["worker_address"]: t["task_id"] for t in joined.tasks}
    return Read(state, joined.iteration_id, tasks, [joined.client_id], {})


def test_a_resumed_read_hands_out_only_the_outputs_not_consumed(state):
    # split 0 whole, 4 outputs of split 1 and the 3rd of split 2 consumed
    read = resumed(state, [key(0), key(1, 4), key(2, 2), key(2, 3)])
    a = read.tasks["a:1"]
    assert read.ask(a, max_splits=2).splits == [
        [0, 10, 20, key(1, 4), key(2)],
        [0, 20, 30, key(2), key(2, 2)],
        [0, 20, 30, key(2, 3), key(3)],
    ]


def test_outputs_per_split_are_bounded_by_the_key_layout():
    assert key(1) - key(0) == PER_SPLIT == 2**32
    assert key(0) == OUTPUT_KEYS  # source elements' keys are below


def test_a_job_without_a_1_to_many_op_keys_source_elements(state):
    dataset_id = register_dataset(state, RANGE_640)
    job_id = create_job(state, dataset_id, DYNAMIC)
    assert not state.records.jobs[job_id].split_outputs


@pytest.mark.parametrize(
    ("data", "consumed", "named"),
    [
        (FLAT_640, [0, 5], "counts source elements"),
        (RANGE_640, [OUTPUT_KEYS, OUTPUT_KEYS + 5], "counts split outputs"),
    ],
)
def test_a_position_of_the_other_kind_of_keys_is_refused(state, data, consumed, named):
    dataset_id = register_dataset(state, data)
    job_id = create_job(state, dataset_id, DYNAMIC)
    request = m.GetOrCreateIteration(job_id=job_id, repetition=0, resume=consumed)
    refused = error(state, request)
    assert refused.code == "INVALID_ARGUMENT"
    assert named in refused.message
    assert "zmqdata 0.1" in refused.message


def rows(ds: zd.Dataset) -> zd.Dataset:
    """A 1-to-many op on top: what is below it runs split by split."""
    return ds.batch(2).unbatch()


@pytest.mark.parametrize(
    ("dataset", "named"),
    [
        (rows(zd.Dataset.range(100).shuffle(10)), "shuffle(seed=None)"),
        (rows(zd.Dataset.range(100).take(10)), "take before distribute"),
        (
            rows(
                zd.Dataset.range(100).map(
                    lambda x: x, num_parallel_calls=2, deterministic=False
                )
            ),
            "map(deterministic=False)",
        ),
        (
            zd.Dataset.range(100)
            .filter(lambda x: x % 3 > 0)
            .batch(4, drop_remainder=True)
            .unbatch(),
            "batch(drop_remainder=True)",
        ),
    ],
)
def test_a_pipeline_that_is_not_a_function_of_its_split_is_refused(
    state, dataset: Any, named: str
):
    dataset_id = register_dataset(state, pipeline(dataset))
    refused = error(
        state, m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC)
    )
    assert refused.code == "INVALID_ARGUMENT"
    assert named in refused.message
    assert "exactly_once=False" in refused.message
    assert state.records.jobs == {}


@pytest.mark.parametrize(
    "dataset",
    [
        rows(zd.Dataset.range(100).shuffle(10, seed=1).repeat()),
        rows(zd.Dataset.range(100)).shuffle(10).take(50),  # above: tracked as they run
        zd.Dataset.range(100).batch(4, drop_remainder=True).unbatch().shuffle(9),
        zd.Dataset.range(100)
        .interleave(lambda x: zd.Dataset.range(x))
        .batch(4, drop_remainder=True),
    ],
)
def test_deterministic_pipelines_are_read_by_split_outputs(state, dataset: Any):
    dataset_id = register_dataset(state, pipeline(dataset))
    job = reply(state, m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC))
    assert state.records.jobs[job.job_id].split_outputs
