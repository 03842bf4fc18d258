"""``TaskDef`` and ``TaskInfo``: the wire maps, round trips and malformed input."""

from __future__ import annotations

from typing import Any

import pytest

from zmqdata._wire import messages as m
from zmqdata._wire.modes import ReadMode
from zmqdata._wire.tasks import TaskDef, TaskInfo
from zmqdata.errors import InvalidArgumentError

TASK_DEF = TaskDef(
    num_workers=3,
    worker_index=1,
    task_id=5,
    iteration_id=2,
    dataset_id="7",
    pipeline=b"\x00\xff",
    processing_mode=2,
    compression="AUTO",
    num_consumers=None,
    cross_trainer_cache=True,
)
TASK_INFO = TaskInfo(
    task_id=5,
    worker_id=4,
    worker_address="w:1",
    data_address="tcp://w:2",
    local_process="p",
    inproc_address="inproc://w",
)


def test_a_task_def_is_the_map_workers_always_got() -> None:
    assert list(TASK_DEF.to_wire().items()) == [
        ("num_workers", 3),
        ("worker_index", 1),
        ("task_id", 5),
        ("iteration_id", 2),
        ("dataset_id", "7"),
        ("pipeline", b"\x00\xff"),
        ("processing_mode", 2),
        ("compression", "AUTO"),
        ("num_consumers", None),
        ("cross_trainer_cache", True),
        ("exactly_once", False),
        ("dealt", False),
        ("split_outputs", False),  # protocol 6; older workers ignore it
    ]
    held = TaskDef.from_wire(
        {**TASK_DEF.to_wire(), "pipeline": b"", "fingerprint": "f"}
    )
    assert list(held.to_wire().items())[-1] == ("fingerprint", "f")


def test_a_task_info_is_the_map_consumers_always_got() -> None:
    assert list(TASK_INFO.to_wire().items()) == [
        ("task_id", 5),
        ("worker_id", 4),
        ("worker_address", "w:1"),
        ("data_address", "tcp://w:2"),
        ("local_process", "p"),
        ("inproc_address", "inproc://w"),
    ]
    signed = TaskInfo.from_wire({**TASK_INFO.to_wire(), "ticket": b"t"})
    assert signed.ticket == b"t"
    assert list(signed.to_wire().items())[-1] == ("ticket", b"t")


@pytest.mark.parametrize("record", [TASK_DEF, TASK_INFO])
def test_round_trips_through_a_control_message(record: TaskDef | TaskInfo) -> None:
    message = m.decode(m.encode(m.ProcessTask(tasks=[record.to_wire()])))
    assert isinstance(message, m.ProcessTask)
    assert type(record).from_wire(message.tasks[0]) == record


def test_omitted_optional_keys_get_their_defaults() -> None:
    required = {
        "task_id": 1,
        "iteration_id": 2,
        "dataset_id": "d",
        "pipeline": b"p",
        "processing_mode": 0,
    }
    task = TaskDef.from_wire(required)
    assert (task.num_workers, task.compression, task.cross_trainer_cache) == (
        None,
        None,
        False,
    )
    info = TaskInfo.from_wire(
        {"task_id": 1, "worker_id": 2, "worker_address": "w", "data_address": "d"}
    )
    assert (info.local_process, info.inproc_address, info.ticket) == ("", "", b"")


def test_unknown_keys_are_ignored() -> None:
    wire = {**TASK_DEF.to_wire(), "added_in_a_later_version": [1, 2]}
    assert TaskDef.from_wire(wire) == TASK_DEF


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("task_id", "5", "task definition task_id: expected int, got str"),
        ("task_id", True, "task definition task_id: expected int, got bool"),
        ("task_id", None, "task definition task_id: expected int, got NoneType"),
        ("pipeline", "p", "task definition pipeline: expected bytes, got str"),
        ("num_workers", 1.0, "num_workers: expected int | NoneType, got float"),
        ("compression", 1, "compression: expected str | NoneType, got int"),
        ("cross_trainer_cache", 1, "cross_trainer_cache: expected bool, got int"),
    ],
)
def test_a_task_def_of_the_wrong_type_names_the_field(
    key: str, value: Any, expected: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=expected):
        TaskDef.from_wire({**TASK_DEF.to_wire(), key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [("worker_id", "4"), ("data_address", b"tcp://w:2"), ("ticket", "t")],
)
def test_a_task_info_of_the_wrong_type_names_the_field(key: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=f"task info {key}: expected"):
        TaskInfo.from_wire({**TASK_INFO.to_wire(), key: value})


@pytest.mark.parametrize("key", ["task_id", "iteration_id", "pipeline"])
def test_a_task_def_without_a_required_key_names_it(key: str) -> None:
    wire = TASK_DEF.to_wire()
    del wire[key]
    with pytest.raises(InvalidArgumentError, match=f"task definition {key}: missing"):
        TaskDef.from_wire(wire)


def test_a_task_info_without_its_address_names_it() -> None:
    wire = TASK_INFO.to_wire()
    del wire["data_address"]
    with pytest.raises(InvalidArgumentError, match="task info data_address: missing"):
        TaskInfo.from_wire(wire)


@pytest.mark.parametrize("data", [[1, 2], None, b"\x80", 5])
def test_not_a_map_is_refused(data: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="task info: expected a map"):
        TaskInfo.from_wire(data)


@pytest.mark.parametrize(
    ("fields", "mode"),
    [
        ({}, ReadMode.CACHE),  # TASK_DEF reads through the cross-trainer cache
        ({"cross_trainer_cache": False}, ReadMode.FIRST_COME),
        ({"cross_trainer_cache": False, "num_consumers": 2}, ReadMode.ROUNDS),
        ({"cross_trainer_cache": False, "num_consumers": 2, "dealt": True}, "dealt"),
        ({"mode": "rounds", "num_consumers": 2}, ReadMode.ROUNDS),
    ],
)
def test_the_read_mode_is_the_dispatchers_else_the_old_fields_say_it(
    fields: dict[str, Any], mode: str
) -> None:
    task = TaskDef.from_wire({**TASK_DEF.to_wire(), **fields})
    assert task.read_mode == mode
    assert TaskDef.from_wire(task.to_wire()) == task


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"mode": "later"}, "task definition mode: unknown 'later'"),
        ({"mode": "rounds"}, "task definition mode: rounds without num_consumers"),
    ],
)
def test_a_task_def_with_a_mode_it_cannot_read_is_refused(
    fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=expected):
        TaskDef.from_wire({**TASK_DEF.to_wire(), **fields})
