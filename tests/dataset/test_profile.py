"""Per-op statistics: the counting wrapper changes nothing, the sampler attributes."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from zmqdata._dataset import profile
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator


def flaky(x: Any) -> Any:
    if x % 5 == 3:
        raise ValueError(x)
    return x


PIPELINES = {
    "filter-batch": lambda: zd.Dataset.range(40).filter(lambda x: x % 3 > 0).batch(4),
    "ignore-errors": lambda: zd.Dataset.range(40).map(flaky).ignore_errors(),
    "unbatch": lambda: zd.Dataset.range(40).batch(6).map(lambda b: b * 2).unbatch(),
}


def run(ds: zd.Dataset, with_profile: bool) -> list[tuple[Any, Any]]:
    node = ds._node
    source = node
    while source.inputs:
        source = source.inputs[0]
    ctx = IterContext(
        split_source=source,
        split_provider=ListSplitProvider([[0, 20], [20, 40]]),
        lineage=True,
        profile=profile.Profile(node) if with_profile else None,
    )
    iterator = make_iterator(node, ctx)
    return [(np.asarray(x).tolist(), iterator.lineage) for x in iterator]


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_counting_changes_neither_elements_nor_lineage(name):
    ds = PIPELINES[name]()
    assert run(ds, with_profile=True) == run(ds, with_profile=False)


def test_a_position_saved_through_the_wrapper_restores():
    ds = zd.Dataset.range(10).map(lambda x: x * 3).batch(3)
    ctx = IterContext(profile=profile.Profile(ds._node))
    iterator = make_iterator(ds._node, ctx)
    next(iterator)
    state = iterator.save()
    rest = [b.tolist() for b in iterator]
    again = make_iterator(ds._node, IterContext(profile=profile.Profile(ds._node)))
    again.restore(state)
    assert [b.tolist() for b in again] == rest == [[9, 12, 15], [18, 21, 24], [27]]


@pytest.mark.parametrize("value", ["x", "-1", "1000001"])
def test_a_bad_period_is_refused_naming_it(monkeypatch, value):
    monkeypatch.setenv("ZMQDATA_PROFILE_EVERY", value)
    with pytest.raises(ValueError, match="ZMQDATA_PROFILE_EVERY"):
        profile.every()


def slow(x: Any) -> Any:
    threading.Event().wait(0.002)  # the user's wait: the map's own time
    return x


def read_timed(ds: zd.Dataset, stats: profile.Profile, count: int) -> None:
    """Reads ``count`` elements as a task's producer does, timing those picked."""
    with make_iterator(ds._node, IterContext(profile=stats)) as iterator:
        for _ in range(count):
            timed = stats.timed()
            next(iterator)
            if timed:
                stats.end()
    stats.finish()


@pytest.mark.exclusive  # compares measured times with slept ones
def test_own_time_is_the_op_s_less_its_inputs_and_adds_up_to_the_producer_s():
    ds = zd.Dataset.range(10**6).map(slow).map(lambda x: x + 1)
    stats = profile.Profile(ds._node, every=4)
    read_timed(ds, stats, 200)
    shown = stats.as_dict(elements=200)
    ops = {op["op"]: op for op in shown["ops"]}
    assert ops["map(slow)"]["own_s"] == pytest.approx(200 * 0.002, rel=0.3)
    assert ops["range"]["own_s"] < 0.05
    assert ops["map(<lambda>)"]["own_s"] < 0.05
    producer = sum(op["own_s"] + op["waited_s"] for op in shown["ops"])
    assert producer + sum(shown["phases"].values()) == pytest.approx(
        shown["elapsed_s"], rel=0.01
    )


def test_a_prefetch_waits_while_its_thread_works():
    ds = zd.Dataset.range(10**6).map(slow).prefetch(4)
    stats = profile.Profile(ds._node, every=1)
    read_timed(ds, stats, 100)
    ops = {op["op"]: op for op in stats.as_dict()["ops"]}
    # The map runs on prefetch's thread: its own time, on another thread; the
    # producer waits in prefetch for it.
    assert ops["map(slow)"]["thread_s"] > 0.1
    assert ops["prefetch"]["waited_s"] > 0.1
    assert ops["prefetch"]["own_s"] == 0


def test_a_parallel_map_s_threads_are_busy():
    ds = zd.Dataset.range(10**6).map(slow, num_parallel_calls=2)
    stats = profile.Profile(ds._node, every=2)
    read_timed(ds, stats, 200)
    [op] = [op for op in stats.as_dict()["ops"] if op["op"] == "map(slow)"]
    assert op["threads"] == 2
    assert op["busy"] > 0.5
    assert op["waited_s"] > 0
