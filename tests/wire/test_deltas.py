"""Worker heartbeats as deltas (``_wire/deltas.py``): diff, merge, the worker's side."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zmqdata._wire import deltas
from zmqdata._wire.deltas import HeartbeatDelta, count, diff, merge
from zmqdata.errors import InvalidArgumentError

scalars = st.one_of(
    st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=4)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text("abc", max_size=2), inner, max_size=3),
    ),
    max_leaves=12,
)
maps = st.dictionaries(st.text("abcdef", max_size=2), values, max_size=5)


def stats(elements: int, tasks: int = 1) -> dict[str, Any]:
    """A worker's stats, shaped as ``worker_stats`` makes them."""
    return {
        "elements": elements,
        "bytes": 8 * elements,
        "tasks": [
            {
                "task_id": t,
                "elements": elements,
                "ops": [{"op": "range", "own_s": 0.5}, {"op": "map", "own_s": 1.5}],
                "phases": {"encode": 0.1},
            }
            for t in range(tasks)
        ],
    }


@given(maps, maps)
def test_merge_makes_the_new_map_again_and_counts_its_growth(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    merged, grown = merge(old, diff(old, new))
    assert merged == new
    assert grown == count(new) - count(old)


def test_only_what_changed_is_sent() -> None:
    old, new = stats(100), stats(100)
    new["tasks"][0]["ops"][1]["own_s"] = 2.0
    assert diff(old, new) == {"tasks": {"@": [{"ops": {"@": [{}, {"own_s": 2.0}]}}]}}
    assert diff(old, old) == {}


def test_lists_of_another_length_are_sent_whole() -> None:
    old, new = stats(1, tasks=1), stats(1, tasks=2)
    assert diff(old, new) == {"tasks": new["tasks"]}


def test_merge_leaves_the_old_map_as_it_was() -> None:
    old = stats(1)
    kept = stats(1)
    merge(old, diff(old, stats(2)))
    assert old == kept


@pytest.mark.parametrize(
    "delta",
    [
        {"tasks": {"@": [5]}},  # an item delta that is no map
        {"~": "elements"},  # removed keys not a list
        {"tasks": {"@": [{"ops": {"@": ["x", {}]}}]}},
    ],
)
def test_a_malformed_delta_is_refused(delta: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"worker_heartbeat\.stats"):
        merge(stats(1), delta)


def test_a_delta_nested_past_the_limit_is_refused() -> None:
    old: dict[str, Any] = {}
    delta: dict[str, Any] = {}
    inner_old, inner_delta = old, delta
    for _ in range(deltas.MAX_DEPTH + 2):
        inner_old["a"], inner_delta["a"] = {}, {}
        inner_old, inner_delta = inner_old["a"], inner_delta["a"]
    with pytest.raises(InvalidArgumentError, match="depth"):
        merge(old, delta)


def test_count_does_not_recurse() -> None:
    deep: Any = 1
    for _ in range(10_000):  # deeper than Python's recursion limit
        deep = [deep]
    assert count(deep) == 10_000


def test_the_worker_sends_a_delta_only_against_a_heartbeat_answered() -> None:
    beats = HeartbeatDelta()
    first = stats(1, tasks=3)
    assert beats.outgoing(first, ["p"]) == (0, first, ["p"])
    beats.sent(1)
    assert beats.outgoing(first, ["p"])[0] == 0  # 1 not answered yet
    beats.sent(2)
    beats.answered(1, resend=False)
    second = stats(1, tasks=3)
    second["bytes"] = 9
    assert beats.outgoing(second, ["p"]) == (1, {"bytes": 9}, [])
    beats.sent(3)
    beats.answered(3, resend=False)  # 2's reply lost: 3 is the base now
    assert beats.outgoing(second, ["p", "q"]) == (3, {}, ["p", "q"])
    beats.sent(4)
    beats.answered(4, resend=True)
    assert beats.outgoing(second, ["p"])[0] == 0


def test_a_delta_over_half_the_stats_goes_whole() -> None:
    beats = HeartbeatDelta()
    beats.outgoing(stats(1), [])
    beats.sent(1)
    beats.answered(1, resend=False)
    busy = stats(2)  # every counter moved
    busy["tasks"][0]["ops"] = [{"op": "range", "own_s": 1.0}, {"op": "map", "own_s": 3}]
    busy["tasks"][0]["phases"] = {"encode": 0.2}
    assert beats.outgoing(busy, []) == (0, busy, [])


def test_pipelines_held_becoming_none_are_sent_whole() -> None:
    beats = HeartbeatDelta()
    beats.outgoing(stats(1), ["p"])
    beats.sent(1)
    beats.answered(1, resend=False)
    assert beats.outgoing(stats(1), []) == (0, stats(1), [])


def test_replies_lost_do_not_grow_the_pending_table() -> None:
    beats = HeartbeatDelta()
    for request_id in range(1, 100):
        beats.outgoing(stats(request_id), [])
        beats.sent(request_id)
    assert len(beats._pending) <= 8
    beats.answered(99, resend=False)
    assert beats.outgoing(stats(99), [])[0] == 99
