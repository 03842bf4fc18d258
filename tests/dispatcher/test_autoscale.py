"""Autoscaling: the rule (pure, fake clock), its inputs and outputs in the state,
and workers that drain and leave (exactly once, no ``worker_timeout_ms`` wait)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatcher.test_exactly_once import CONFIG, start, state_of
from tests.dispatcher.test_replay import RecordingState
from tests.dispatcher.test_state import (
    DYNAMIC,
    create_job,
    heartbeat,
    join,
    pipeline,
    register_dataset,
    register_worker,
    reply,
)
from zmqdata._dispatcher.autoscale import Autoscaler, Policy, Signals
from zmqdata._dispatcher.server import _collect
from zmqdata._wire import messages as m

pytestmark = pytest.mark.timeout(30)

POLICY = Policy(window_s=2.0, cooldown_s=4.0, min_workers=1, max_workers=4)


def run(
    scaler: Autoscaler,
    start_s: float,
    end_s: float,
    workers: int,
    starved: float | None,
    fill: float | None,
) -> list[tuple[float, int, str]]:
    """Observations every 0.5 s; ``(time, recommended, reason)`` each."""
    out = []
    t = start_s
    while t < end_s:
        advice = scaler.observe(Signals(t, workers, starved, fill))
        out.append((t, advice.recommended_workers, advice.reason))
        t += 0.5
    return out


def steps(trace: list[tuple[float, int, str]]) -> list[tuple[float, int]]:
    """When the recommendation changed, and to what."""
    return [
        (t, n)
        for (t, n, _), (_, before, _) in zip(trace[1:], trace, strict=False)
        if n != before
    ]


# ------------------------------------------------------------------ the rule


def test_starved_consumers_and_empty_buffers_step_up_once_per_cooldown():
    scaler = Autoscaler(POLICY)
    trace = run(scaler, 0.0, 9.0, workers=1, starved=0.8, fill=0.05)
    # A full window first (2 s), then one step per cool-down (4 s), from the
    # live count (still 1: nobody added a worker): no runaway.
    assert steps(trace) == [(2.0, 2)]
    assert trace[-1][1] == 2
    assert "producers are the bottleneck" in trace[4][2]
    # At 6 s the rule held again (a step from 1 live worker to 2: no change);
    # once the second worker is live, the next cool-down steps to 3.
    trace = run(scaler, 9.0, 15.0, workers=2, starved=0.8, fill=0.05)
    assert steps([(8.5, 2, ""), *trace]) == [(10.0, 3)]


def test_full_buffers_and_fed_consumers_step_down_to_the_minimum():
    scaler = Autoscaler(POLICY)
    trace = run(scaler, 0.0, 2.5, workers=3, starved=0.0, fill=0.9)
    assert trace[-1][1] == 2
    assert trace[-1][2].startswith("down:")
    trace = run(scaler, 2.5, 7.0, workers=2, starved=0.0, fill=0.9)
    assert trace[-1][1] == 1
    trace = run(scaler, 7.0, 20.0, workers=1, starved=0.0, fill=0.9)
    assert {n for _, n, _ in trace} == {1}  # never below min_workers


def test_in_between_signals_hold_and_a_single_blip_does_not_step_down():
    scaler = Autoscaler(POLICY)
    # Consumers wait a little, buffers half full: neither rule holds.
    trace = run(scaler, 0.0, 10.0, workers=2, starved=0.1, fill=0.4)
    assert {n for _, n, _ in trace} == {2}
    assert trace[-1][2].startswith("hold:")
    # Full buffers, but one observation of a waiting consumer in the window.
    run(scaler, 10.0, 11.0, workers=2, starved=0.0, fill=0.9)
    scaler.observe(Signals(11.0, 2, 0.5, 0.9))
    trace = run(scaler, 11.5, 13.0, workers=2, starved=0.0, fill=0.9)
    assert {n for _, n, _ in trace} == {2}


def test_starved_consumers_with_full_buffers_do_not_scale_up():
    # Buffers full but consumers wait: the bottleneck is not the producers
    # (the network, the consumer's own decoding): more workers would not help.
    trace = run(Autoscaler(POLICY), 0.0, 10.0, workers=2, starved=0.9, fill=0.9)
    assert {n for _, n, _ in trace} == {2}


def test_no_consumer_and_idle_workers_scale_down_and_max_caps_up():
    scaler = Autoscaler(POLICY)
    trace = run(scaler, 0.0, 3.0, workers=2, starved=None, fill=None)
    assert trace[-1][1] == 1
    capped = Autoscaler(POLICY)
    trace = run(capped, 0.0, 20.0, workers=4, starved=1.0, fill=0.0)
    assert {n for _, n, _ in trace} == {4}


def test_no_worker_recommends_the_minimum():
    advice = Autoscaler(POLICY).observe(Signals(0.0, 0, 1.0, None))
    assert (advice.recommended_workers, advice.reason) == (
        1,
        "hold: no worker registered",
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"window_s": -1}, "window_s must be >= 0"),
        ({"cooldown_s": float("nan")}, "cooldown_s must be >= 0"),
        ({"starved_up": 1.5}, "starved_up must be in [0, 1], got 1.5"),
        ({"starved_down": 0.3}, "need a gap"),
        ({"min_workers": 0}, "min_workers must be >= 1, got 0"),
        ({"min_workers": 3, "max_workers": 2}, "max_workers must be >= min_workers"),
    ],
)
def test_bad_policies_are_refused_naming_the_value(fields: dict[str, Any], message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        Policy(**fields)


# ------------------------------------------------------------------ in the state


def test_status_and_metrics_show_the_recommendation_from_heartbeats():
    state = RecordingState(CONFIG)
    state.autoscaler = Autoscaler(Policy(window_s=1.0, cooldown_s=1.0))
    worker = register_worker(state, "a:1").worker_id
    dataset_id = register_dataset(state, pipeline_of_range())
    client = join(state, create_job(state, dataset_id, DYNAMIC)).client_id
    t = 0.0
    while t <= 1.5:
        stats = {"buffer_fill": 0.02, "elements": int(t * 100)}
        reply(
            state,
            m.WorkerHeartbeat(request_id=2, worker_id=worker, stats=stats),
            peer=b"a:1",
            now=t,
        )
        reply(state, m.ClientHeartbeat(client_id=client, starved=0.9), now=t)
        state.tick(t)
        t += 0.5
    shown = state.status()["autoscale"]
    assert shown["recommended_workers"] == 2
    assert shown["workers"] == 1
    assert "consumers waited 90%, buffers 2% full" in shown["reason"]
    [gauge] = [
        metric
        for metric in _collect(state, None, None)
        if metric.name == "zmqdata_dispatcher_recommended_workers"
    ]
    assert gauge.samples[0].value == 2


def test_a_hostile_starved_value_is_clamped():
    state = RecordingState(CONFIG)
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, pipeline_of_range())
    client = join(state, create_job(state, dataset_id, DYNAMIC)).client_id
    for value in (float("nan"), float("inf"), -5.0):
        reply(state, m.ClientHeartbeat(client_id=client, starved=value))
        assert 0.0 <= state.reads[client].last_starved <= 1.0


def pipeline_of_range() -> bytes:
    import zmqdata as zd

    return pipeline(zd.Dataset.range(640))


# ------------------------------------------------------------------ draining


def drain(state: RecordingState, address: str, worker_id: int, now: float, **kw: Any):
    message = m.WorkerHeartbeat(request_id=3, worker_id=worker_id, **kw)
    return state.handle(address.encode(), message, now)


def test_a_draining_worker_gets_no_new_task_and_is_not_supply():
    state = RecordingState(CONFIG)
    read = start(state)
    workers = read.workers()
    drain(state, "a:1", workers["a:1"], 0.1, draining=True)
    assert state.draining == {workers["a:1"]}
    # A new iteration (another job) starts only on the worker not draining.
    dataset_id = register_dataset(state, pipeline_of_range())
    other = join(state, create_job(state, dataset_id, DYNAMIC))
    assert [t["worker_address"] for t in other.tasks] == ["b:1"]
    state.tick(0.2)
    assert state.status()["autoscale"]["workers"] == 1
    # Its running task goes on: consumers still read what it buffered.
    assert read.tasks["a:1"] in state.records.tasks


def test_a_leaving_worker_is_dropped_at_once_and_its_keys_handed_out_again():
    state = RecordingState(CONFIG)
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=2)  # keys 0..20 to the leaving worker
    read.heartbeat(0, acked=[[a, 0, 12]])  # its consumers read 12 of them
    workers = read.workers()
    drain(state, "a:1", workers["a:1"], 0.2, draining=True)
    # Well before worker_timeout_ms (1 s): it says it leaves.
    out = drain(state, "a:1", workers["a:1"], 0.3, draining=True, leaving=True)
    assert isinstance(out[0][1], m.WorkerHeartbeatReply)
    assert "a:1" not in read.workers()
    assert state.draining == set()
    assert read.iteration.orphans[a]["keys"] == [12, 20]
    told = state_of(read.heartbeat(0, task_epoch=0, now=0.4))
    assert [t["task_id"] for t in told.tasks] == [b]
    read.heartbeat(0, task_epoch=told.task_epoch, now=0.5)  # the fence
    assert read.ask(b).splits == [[0, 12, 20]]  # exactly what was not read
    assert heartbeat(state, "b:1", workers["b:1"], [], now=0.6) is not None
