"""``outputs``: one output per read mode, chosen once from the task definition."""

from __future__ import annotations

from typing import Any

import pytest

from zmqdata._wire import messages as m
from zmqdata._wire.modes import ReadMode, ShardingPolicy
from zmqdata._wire.tasks import TaskDef
from zmqdata._worker.buffer import Raw
from zmqdata._worker.dealt import DealtSend
from zmqdata._worker.outputs import (
    ROUND_END,
    CacheOutput,
    DealtOutput,
    FirstComeOutput,
    RoundsOutput,
    output_for,
)
from zmqdata._worker.serving import Refuse, Send

DYNAMIC = int(ShardingPolicy.DYNAMIC)


def _task(**fields: Any) -> TaskDef:
    return TaskDef(task_id=3, iteration_id=1, dataset_id="d", pipeline=b"", **fields)


def _request(max_elements: int = 8, **fields: Any) -> m.GetElements:
    return m.GetElements(task_id=3, client_id=1, max_elements=max_elements, **fields)


@pytest.mark.parametrize(
    ("fields", "kind", "tracked"),
    [
        ({"processing_mode": 0}, FirstComeOutput, False),
        ({"processing_mode": DYNAMIC, "exactly_once": True}, FirstComeOutput, True),
        ({"processing_mode": 0, "num_consumers": 2}, RoundsOutput, False),
        (
            {"processing_mode": DYNAMIC, "num_consumers": 2, "mode": "rounds"},
            RoundsOutput,
            False,
        ),
        (
            {"processing_mode": DYNAMIC, "exactly_once": True, "dealt": True},
            DealtOutput,
            False,  # exactly once by (split, index), not by keys
        ),
        (
            {"processing_mode": DYNAMIC, "exactly_once": True, "mode": "cache"},
            CacheOutput,
            False,  # every trainer reads every element: no "once"
        ),
    ],
)
def test_the_output_is_the_read_modes_and_tracked_has_one_definition(
    fields: dict[str, Any], kind: type, tracked: bool
) -> None:
    output = output_for(_task(**fields), 8, 1024, cache_bytes=1024)
    assert type(output) is kind
    assert output.tracked is tracked
    assert (output.handed is not None) is tracked


def test_first_come_serves_in_order_and_settles_once_read() -> None:
    output = FirstComeOutput(8, 1024, tracked=False, alone=True)
    assert output.put(Raw(1), 8, None)
    assert not output.put(Raw(2), 8, None)
    assert output.answer(_request(1)) == Send([Raw(1)], False)
    refused = output.answer(_request(split=0, indices=[0]))
    assert isinstance(refused, Refuse)
    assert refused.code == "INVALID_ARGUMENT"
    output.finish(None)
    assert (output.ended, output.drained, output.settled(stopped=True)) == (
        True,
        False,
        False,  # at most once: its element is this worker's alone
    )
    assert output.answer(_request()) == Send([Raw(2)], True)
    assert output.drained
    assert output.settled(stopped=True)
    assert FirstComeOutput(8, 1024, tracked=True, alone=False).settled(False)


def test_a_round_takes_one_item_per_consumer_and_fails_once_it_cannot_fill() -> None:
    output = RoundsOutput(8, 1024, tracked=False, alone=False, num_consumers=2)
    output.put(Raw(1), 8, None)
    assert output.take_round() is None  # wait for the second
    output.put(Raw(2), 8, None)
    output.put(Raw(3), 8, None)
    assert output.take_round() == [Raw(1), Raw(2)]
    output.finish(None)
    assert output.take_round() == Refuse("FAILED_PRECONDITION", ROUND_END)
    failed = RoundsOutput(8, 1024, tracked=False, alone=False, num_consumers=2)
    failed.finish(("DATA_LOSS", "boom"))
    assert failed.take_round() == Refuse("DATA_LOSS", "boom")


def test_a_dealt_output_keeps_each_element_at_its_split_and_index() -> None:
    output = DealtOutput(8, 1024)
    output.buffer.open(0, skip=0)
    output.put(Raw("a"), 8, None, at=(0, 0))
    output.buffer.end(0, 1)
    reply = output.answer(_request(split=0, indices=[0]))
    assert isinstance(reply, DealtSend)
    assert reply.items == [Raw("a")]
    assert not reply.end_of_sequence
    assert reply.told() == {
        "split": 0,
        "indices": [0],
        "produced": 1,
        "ended": True,
        "counts": [0, 1],
    }
    assert output.settled(stopped=False)
    assert not output.drained
    output.finish(None)
    assert output.drained


def test_the_cache_serves_each_trainer_and_is_never_drained() -> None:
    output = CacheOutput(1024, 4096, alone=True)
    output.put(Raw(1), 8, None)
    assert output.answer(_request(trainer_id="a")) == Send([Raw(1)], False)
    assert output.answer(_request(trainer_id="b")) == Send([Raw(1)], False)
    assert isinstance(output.answer(_request(split=0, indices=[0])), Refuse)
    output.finish(None)
    assert (output.ended, output.drained, output.buffered()) == (True, False, (1, 8))
    assert output.capacity_bytes == 4096
    assert output.settled(stopped=True)
    assert not output.settled(stopped=False)
    assert output.mode is ReadMode.CACHE
