"""A control plane whose cost grows with work: ``unchanged`` iteration states,
worker heartbeats as deltas, the quiet intervals the dispatcher names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatcher.splits import next_split_request
from tests.dispatcher.test_state import (
    DYNAMIC,
    RANGE_20,
    WORKER_TIMEOUT_S,
    create_job,
    error,
    join,
    make_state,
    register_dataset,
    register_worker,
    reply,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import replies
from zmqdata._dispatcher.splits import SPLIT_REQUESTS_PER_S, split_period_ms
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._dispatcher.status import render
from zmqdata._wire import deltas
from zmqdata._wire import messages as m


@pytest.fixture
def state() -> DispatcherState:
    return make_state()


def client_heartbeat(
    state: DispatcherState, client_id: int, known: int, now: float = 0.0
) -> m.IterationState:
    answer = reply(
        state,
        m.ClientHeartbeat(request_id=9, client_id=client_id, known=known),
        now=now,
    )
    assert isinstance(answer, m.IterationState), answer
    return answer


def worker_heartbeat(
    state: DispatcherState, name: str, worker_id: int, request_id: int, **fields: Any
) -> m.WorkerHeartbeatReply:
    answer = reply(
        state,
        m.WorkerHeartbeat(request_id=request_id, worker_id=worker_id, **fields),
        peer=name.encode(),
    )
    assert isinstance(answer, m.WorkerHeartbeatReply), answer
    return answer


# ------------------------------------------------------------------ consumers


def test_a_consumer_that_knows_the_state_is_told_unchanged(
    state: DispatcherState,
) -> None:
    register_worker(state, "w1:1")
    first = join(state, create_job(state, register_dataset(state, RANGE_20), DYNAMIC))
    assert first.revision != 0
    assert not first.unchanged
    assert first.tasks
    same = client_heartbeat(state, first.client_id, known=first.revision)
    assert (same.unchanged, same.tasks, same.revision) == (True, [], first.revision)
    assert (same.finished, same.task_epoch) == (first.finished, first.task_epoch)
    assert same.fence_timeout_ms == state.config.fence_timeout_ms
    stale = client_heartbeat(state, first.client_id, known=first.revision + 1)
    assert (stale.unchanged, stale.tasks) == (False, first.tasks)


def test_a_new_task_or_a_lost_worker_changes_the_revision(
    state: DispatcherState,
) -> None:
    register_worker(state, "w1:1")
    first = join(state, create_job(state, register_dataset(state, RANGE_20), DYNAMIC))
    register_worker(state, "w2:1")  # a task of the running iteration on it
    grown = client_heartbeat(state, first.client_id, known=first.revision)
    assert (grown.unchanged, len(grown.tasks)) == (False, 2)
    later = WORKER_TIMEOUT_S + 1
    reply(state, m.ClientHeartbeat(request_id=8, client_id=grown.client_id), now=later)
    state.tick(later)  # both workers silent: gone
    lost = client_heartbeat(state, first.client_id, known=grown.revision, now=later)
    assert (lost.unchanged, lost.tasks) == (False, [])


def test_the_revision_is_the_same_in_every_process() -> None:
    """A fault-tolerant restart rebuilds the same state: consumers stay quiet."""
    states = [DispatcherState(DispatcherConfig()) for _ in range(2)]
    revisions = []
    for state in states:
        register_worker(state, "w1:1")
        job = create_job(state, register_dataset(state, RANGE_20), DYNAMIC)
        revisions.append(join(state, job).revision)
    assert revisions[0] == revisions[1]


def test_multi_rank_reads_are_always_told_everything(state: DispatcherState) -> None:
    register_worker(state, "w1:1")
    dataset_id = register_dataset(state, RANGE_20)
    job = create_job(
        state, dataset_id, DYNAMIC, job_name="dealt", num_consumers=2, seed=0
    )
    first = join(state, job)
    again = client_heartbeat(state, first.client_id, known=first.revision)
    assert not again.unchanged
    assert again.deal


# ------------------------------------------------------------------ workers


def test_a_worker_is_told_its_longest_quiet_interval(state: DispatcherState) -> None:
    answer = register_worker(state, "w1:1")
    assert answer.heartbeat_max_ms == state.config.worker_timeout_ms // 4


def test_a_delta_applies_to_the_heartbeat_it_names(state: DispatcherState) -> None:
    worker = register_worker(state, "w1:1").worker_id
    full = {"elements": 10, "bytes": 80, "tasks": []}
    worker_heartbeat(state, "w1:1", worker, 5, stats=full, pipelines=["f1"])
    answer = worker_heartbeat(state, "w1:1", worker, 6, stats={"elements": 30}, base=5)
    assert not answer.resend
    sample = state.worker_samples[worker]
    assert sample.stats == {"elements": 30, "bytes": 80, "tasks": []}
    assert state.held_pipelines[worker] == {"f1"}  # empty with a base: the same
    assert sample.elements_per_s == 0.0  # same time: no rate yet


def test_a_delta_against_another_heartbeat_asks_for_everything(
    state: DispatcherState,
) -> None:
    worker = register_worker(state, "w1:1").worker_id
    worker_heartbeat(state, "w1:1", worker, 5, stats={"elements": 10})
    answer = worker_heartbeat(state, "w1:1", worker, 7, stats={"elements": 9}, base=6)
    assert answer.resend
    assert state.worker_samples[worker].stats == {"elements": 10}  # kept


def test_a_restarted_dispatcher_asks_for_everything() -> None:
    state = DispatcherState(DispatcherConfig())
    worker = register_worker(state, "w1:1").worker_id
    answer = worker_heartbeat(state, "w1:1", worker, 3, stats={"a": 1}, base=2)
    assert answer.resend
    assert worker not in state.worker_samples


def test_stats_grown_by_deltas_past_the_bound_are_refused(
    state: DispatcherState, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deltas, "MAX_VALUES", 10)
    worker = register_worker(state, "w1:1").worker_id
    worker_heartbeat(state, "w1:1", worker, 1, stats={"a": [1, 2, 3]})
    grown = {"b": list(range(8))}
    message = m.WorkerHeartbeat(request_id=2, worker_id=worker, stats=grown, base=1)
    refused = error(state, message, peer=b"w1:1")
    assert refused.code == "INVALID_ARGUMENT"
    assert "over 10" in refused.message
    assert state.worker_samples[worker].stats == {"a": [1, 2, 3]}


def test_the_status_shows_merged_stats(state: DispatcherState) -> None:
    worker = register_worker(state, "w1:1").worker_id
    worker_heartbeat(state, "w1:1", worker, 1, stats={"elements": 5, "bytes": 1})
    worker_heartbeat(state, "w1:1", worker, 2, stats={"elements": 6}, base=1)
    shown = render(state.records, state.worker_samples, {}, now=0.0)
    assert shown["workers"][0]["stats"] == {"elements": 6, "bytes": 1}


def test_revision_names_what_consumers_are_told() -> None:
    from zmqdata._dispatcher import model

    iteration = model.Iteration(1, 1, 0)
    before = replies.revision(iteration)
    iteration.horizon = 4
    assert replies.revision(iteration) != before


def test_a_trace_window_wakes_every_worker(state: DispatcherState) -> None:
    register_worker(state, "w1:1")
    register_worker(state, "w2:1")
    sent = state.handle(b"cli", m.StartTrace(request_id=3, seconds=1.0), 0.0)
    woken = {
        peer for peer, message in sent if isinstance(message, m.WorkerHeartbeatReply)
    }
    assert woken == {b"w1:1", b"w2:1"}
    wakes = [
        message for _, message in sent if isinstance(message, m.WorkerHeartbeatReply)
    ]
    assert all(wake.request_id == 0 and wake.trace for wake in wakes)


# ------------------------------------------------------------------ split requests


def test_split_requests_keep_a_worker_alive_and_name_a_period(
    state: DispatcherState,
) -> None:
    register_worker(state, "w0:1")
    iteration = join(
        state, create_job(state, register_dataset(state, RANGE_20), DYNAMIC)
    )
    now, asked = 0.0, 0
    while now < 3 * WORKER_TIMEOUT_S:  # no heartbeat: split requests only
        now += 0.1
        state.tick(now)
        client_heartbeat(state, iteration.client_id, iteration.revision, now)
        if round(now * 10) % 3 == 0:
            request = next_split_request(state, iteration.iteration_id)
            answer = reply(state, request, peer=b"w0:1", now=now)
            assert isinstance(answer, m.GetSplitReply), answer
            asked += 1
    assert asked >= 9
    assert len(state.records.workers) == 1  # not lost
    assert answer.period_ms == 0  # one worker: as often as worthwhile
    for name in ("w1:1", "w2:1", "w3:1", "w4:1"):
        register_worker(state, name, now=now)
    assert reply(state, request, peer=b"w0:1", now=now).period_ms == 1  # 5 workers
    for _ in range(15):
        now += 0.1
        state.tick(now)
    assert len(state.records.workers) == 0  # silent at last: all lost


def test_the_split_period_grows_with_the_fleet_up_to_the_heartbeat_ceiling() -> None:
    ceiling = 2_500
    periods = [split_period_ms(n, ceiling) for n in (1, 1_000, 4_000, 10_000, 10**6)]
    assert periods == [0, 250, 1_000, 2_500, 2_500]
    assert SPLIT_REQUESTS_PER_S * 2.5 == 10_000  # where the ceiling takes over


def test_a_worker_reporting_no_buffer_fill_counts_as_no_supply(state: DispatcherState):
    """The autoscaler's supply follows each worker's last stats, not a stale fill."""
    worker_id = register_worker(state, "w1:1").worker_id
    worker_heartbeat(state, "w1:1", worker_id, 1, stats={"buffer_fill": 0.75})
    assert state._signals(1.0).fill == 0.75
    worker_heartbeat(state, "w1:1", worker_id, 2, stats={"tasks_running": 0})
    assert state._signals(1.0).fill is None
