"""A worker's pipelines held by fingerprint (``_worker/pipelines.py``)."""

from __future__ import annotations

import dataclasses

import zmqdata as zd
from zmqdata._dataset import graph
from zmqdata._wire.messages import MAX_PIPELINES_HELD
from zmqdata._wire.tasks import TaskDef
from zmqdata._worker.pipelines import Pipelines


def task_of(ds: zd.Dataset, task_id: int = 1) -> TaskDef:
    data = graph.serialize(ds._node)
    return TaskDef(
        task_id=task_id,
        iteration_id=1,
        dataset_id=str(task_id),
        pipeline=data,
        processing_mode=0,
        fingerprint=graph.fingerprint(data),
    )


def test_a_held_pipeline_is_decoded_once_and_run_anew() -> None:
    shuffled = zd.Dataset.range(50).shuffle(50, seed=3)
    held = Pipelines()
    task = task_of(shuffled)
    pipeline = held.resolve(task)
    assert pipeline is not None
    first = pipeline.root()
    assert held.resolve(dataclasses.replace(task, task_id=2, pipeline=b"")) is pipeline
    second = pipeline.root()
    assert first is not second
    assert first.args is second.args
    # Each run starts at the first pass, as a pipeline decoded for it would.
    order = [int(x) for x in zd.Dataset(first)]
    assert [int(x) for x in zd.Dataset(second)] == order
    assert [int(x) for x in zd.Dataset(first)] != order  # a second pass reshuffles


def test_the_least_recently_used_go_past_the_capacity() -> None:
    tasks = [task_of(zd.Dataset.range(n + 1), n) for n in range(3)]
    size = len(tasks[0].pipeline)
    held = Pipelines(capacity_bytes=2 * size)
    for task in tasks[:2]:
        held.resolve(task)
    held.resolve(dataclasses.replace(tasks[0], pipeline=b""))  # used again: kept
    held.resolve(tasks[2])
    assert held.held() == [tasks[0].fingerprint, tasks[2].fingerprint]
    assert held.resolve(dataclasses.replace(tasks[1], pipeline=b"")) is None


def test_the_latest_is_kept_past_any_capacity_and_a_heartbeat_names_few() -> None:
    held = Pipelines(capacity_bytes=0)
    tasks = [task_of(zd.Dataset.range(n + 1), n) for n in range(MAX_PIPELINES_HELD + 2)]
    for task in tasks:
        held.resolve(task)
    assert held.held() == [tasks[-1].fingerprint]
    held = Pipelines()
    for task in tasks:
        held.resolve(task)
    assert len(held.held()) == MAX_PIPELINES_HELD


def test_a_pipeline_without_a_fingerprint_is_run_but_not_held() -> None:
    held = Pipelines()
    task = dataclasses.replace(task_of(zd.Dataset.range(3)), fingerprint="")
    pipeline = held.resolve(task)
    assert pipeline is not None
    assert pipeline.root().op == "range"
    assert held.held() == []
