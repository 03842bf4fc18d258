"""Static sharding (worker indices, job checks, task defs) and job GC, with a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatcher.test_state import (
    client_heartbeat,
    create_job,
    error,
    heartbeat,
    join,
    register_dataset,
    register_worker,
    reply,
    task_ids,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher.placement import worker_index
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

OFF, DYNAMIC, FILE, DATA, FILE_OR_DATA, HINT = range(6)
STATIC = (FILE, DATA, FILE_OR_DATA, HINT)


def static_state(*addresses: str) -> DispatcherState:
    return DispatcherState(
        DispatcherConfig(
            worker_addresses=addresses, worker_timeout_ms=1_000, client_timeout_ms=2_000
        )
    )


def gc_state(**options: object) -> DispatcherState:
    """GC checked every 0.1 s; collects after 1 s without a consumer."""
    return DispatcherState(
        DispatcherConfig(
            worker_timeout_ms=60_000,
            client_timeout_ms=60_000,
            job_gc_check_interval_ms=100,
            job_gc_timeout_ms=1_000,
            **options,  # type: ignore[arg-type]
        )
    )


def release(state: DispatcherState, client_id: int, now: float) -> None:
    answer = reply(state, m.ReleaseIterationClient(client_id=client_id), now=now)
    assert isinstance(answer, m.Ok), answer


# ------------------------------------------------------------------ worker indices


@pytest.mark.parametrize(
    ("address", "addresses", "taken", "expected"),
    [
        ("h:5", ("g:5", "h:5"), set(), 1),  # host:port, exact
        ("h:5", ("h:6",), set(), None),  # another port
        ("h:5", ("h",), set(), 0),  # bare host: any port
        ("h:5", ("h:%port%",), set(), 0),  # placeholder: any port
        ("h:5", ("h:%port%", "h:%port%"), {0}, 1),  # first free placeholder
        ("h:5", ("h:%port%",), {0}, None),  # all taken
        ("h:5", ("h:%port%", "h:5"), set(), 1),  # exact beats placeholder
        ("h:5", ("hh:%port%", "g"), set(), None),  # other hosts
        ("h", ("h",), set(), 0),  # a worker without a port
        ("[::1]:5", ("[::1]:%port%",), set(), 0),  # IPv6
        ("h:5", None, set(), None),  # no list at all
    ],
)
def test_worker_index_matching(address, addresses, taken, expected):
    assert worker_index(address, addresses, taken) == expected


def test_registered_workers_get_their_index_in_worker_addresses():
    state = static_state("a:1", "b:%port%", "b:%port%", "c")
    replies = {
        name: register_worker(state, name)
        for name in ("c:9", "b:7", "a:1", "b:8", "d:1")
    }
    indices = {name: r.worker_index for name, r in replies.items()}
    assert indices == {"c:9": 3, "b:7": 1, "a:1": 0, "b:8": 2, "d:1": None}
    assert {
        w.worker_address: w.index for w in state.records.workers.values()
    } == indices


def test_a_restarted_worker_takes_over_the_free_slot():
    state = static_state("b:%port%", "b:%port%")
    first = register_worker(state, "b:7")
    assert register_worker(state, "b:8").worker_index == 1
    state.tick(now=0.5)
    heartbeat(state, "b:8", state_worker_id(state, "b:8"), [], now=0.9)
    state.tick(now=1.5)  # b:7 timed out: slot 0 is free
    assert first.worker_id not in state.records.workers
    assert register_worker(state, "b:9", now=1.6).worker_index == 0
    # Re-registering the same address keeps its (exact) slot.
    assert register_worker(state, "b:9", now=1.7).worker_index == 0


def state_worker_id(state: DispatcherState, address: str) -> int:
    [worker_id] = [
        w.worker_id
        for w in state.records.workers.values()
        if w.worker_address == address
    ]
    return worker_id


# ------------------------------------------------------------------ static jobs


@pytest.mark.parametrize("mode", STATIC)
def test_static_job_without_worker_addresses_is_an_error(mode):
    state = DispatcherState(DispatcherConfig())
    dataset = register_dataset(state)
    answer = error(
        state,
        m.GetOrCreateJob(
            dataset_id=dataset, processing_mode=mode, target_workers="LOCAL"
        ),
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert "DispatcherConfig.worker_addresses" in answer.message
    assert "static sharding" in answer.message


@pytest.mark.parametrize("target", ["ANY", "AUTO", "any"])
def test_static_job_must_read_local_workers(target):
    state = static_state("a:1")
    dataset = register_dataset(state)
    answer = error(
        state,
        m.GetOrCreateJob(
            dataset_id=dataset, processing_mode=DATA, target_workers=target
        ),
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert "Static sharding requires reading from local workers" in answer.message
    assert repr(target) in answer.message


def test_static_tasks_carry_the_worker_index_and_skip_unlisted_workers():
    state = static_state("a:1", "b:1", "c:1")
    register_worker(state, "b:1")
    register_worker(state, "x:1")  # not listed: no static task
    dataset = register_dataset(state)
    job = create_job(state, dataset, HINT, target_workers="LOCAL")
    joined = join(state, job)
    assert [t["worker_address"] for t in joined.tasks] == ["b:1"]
    # A listed worker that registers later gets a task; its def says where it sits.
    late = register_worker(state, "a:1")
    [task] = late.tasks
    assert (task["num_workers"], task["worker_index"]) == (3, 0)
    assert task["processing_mode"] == HINT
    x_id = state_worker_id(state, "x:1")
    assert heartbeat(state, "x:1", x_id, []).new_tasks == []
    # OFF jobs still run everywhere, without an index.
    off = join(state, create_job(state, dataset, OFF))
    assert len(off.tasks) == 3
    [x_task] = heartbeat(state, "x:1", x_id, []).new_tasks
    assert (x_task["num_workers"], x_task["worker_index"]) == (None, None)


def test_status_and_job_names_keep_static_modes():
    state = static_state("a:1")
    dataset = register_dataset(state)
    create_job(state, dataset, FILE_OR_DATA, job_name="j", target_workers="LOCAL")
    assert create_job(
        state, dataset, FILE_OR_DATA, job_name="j", target_workers="LOCAL"
    ) == create_job(state, dataset, FILE_OR_DATA, job_name="j", target_workers="LOCAL")
    [job] = state.status()["jobs"]
    assert job["processing_mode"] == "FILE_OR_DATA"


# ------------------------------------------------------------------ job GC


def abandoned(state: DispatcherState, mode: int = OFF, now: float = 0.0, **job: Any):
    """A worker, and a named job whose one consumer left at ``now``."""
    worker = register_worker(state, "w:1")
    job_id = create_job(state, register_dataset(state), mode, job_name="j", **job)
    joined = join(state, job_id, now=now)
    release(state, joined.client_id, now)
    return worker, job_id, joined


def test_an_abandoned_iteration_is_collected_after_the_timeout():
    state = gc_state()
    worker, job, joined = abandoned(state, now=10.0)
    [task_id] = task_ids(joined)
    state.tick(now=10.5)
    state.tick(now=10.95)
    assert not state.records.iterations[joined.iteration_id].collected
    assert task_id in state.records.tasks
    state.tick(now=11.05)
    iteration = state.records.iterations[joined.iteration_id]
    assert iteration.collected
    assert not iteration.tasks
    assert task_id not in state.records.tasks
    # The worker learns at its next heartbeat that the task is gone.
    answer = heartbeat(state, "w:1", worker.worker_id, [[task_id, False]], now=11.1)
    assert answer.tasks_to_delete == [task_id]
    # A new iterator on the job starts a fresh iteration of that repetition.
    again = join(state, job, now=11.2)
    assert again.iteration_id != joined.iteration_id
    assert task_ids(again)
    assert task_id not in task_ids(again)
    assert not again.finished


def test_gc_runs_only_every_check_interval():
    state = gc_state()
    _, _, joined = abandoned(state, now=0.0)
    state.tick(now=0.95)  # checks, too early; the next check is due at 1.05
    state.tick(now=1.0)
    assert not state.records.iterations[joined.iteration_id].collected
    state.tick(now=1.05)
    assert state.records.iterations[joined.iteration_id].collected


def test_an_iteration_with_a_consumer_is_not_collected():
    state = gc_state()
    register_worker(state, "w:1")
    job = create_job(state, register_dataset(state), OFF, job_name="j")
    first = join(state, job, now=0.0)
    second = join(state, job, now=0.0)
    release(state, first.client_id, 0.0)
    client_heartbeat(state, second.client_id, now=5.0)
    state.tick(now=5.0)
    assert not state.records.iterations[first.iteration_id].collected
    # The timeout counts from the last consumer's departure.
    release(state, second.client_id, 5.0)
    state.tick(now=5.9)
    assert not state.records.iterations[first.iteration_id].collected
    state.tick(now=6.1)
    assert state.records.iterations[first.iteration_id].collected


def test_a_consumer_timing_out_starts_the_gc_clock():
    state = DispatcherState(
        DispatcherConfig(
            client_timeout_ms=500, job_gc_check_interval_ms=100, job_gc_timeout_ms=1_000
        )
    )
    register_worker(state, "w:1")
    job = create_job(state, register_dataset(state), OFF, job_name="j")
    joined = join(state, job, now=0.0)
    state.tick(now=0.6)  # the client is released (timed out) at 0.6
    assert joined.client_id not in state.records.clients
    assert state.liveness.released_at(joined.iteration_id) == 0.6
    heartbeat(state, "w:1", state_worker_id(state, "w:1"), [], now=1.5)
    state.tick(now=1.5)
    assert not state.records.iterations[joined.iteration_id].collected
    state.tick(now=1.7)
    assert state.records.iterations[joined.iteration_id].collected
    # The consumer comes back: its iteration is gone, and it is told why.
    answer = client_heartbeat(state, joined.client_id, now=1.8)
    assert isinstance(answer, m.Error)
    assert answer.code == "FAILED_PRECONDITION"
    assert "garbage collected due to inactivity" in answer.message
    assert "job_gc_timeout_ms" in answer.message


def test_finished_iterations_are_not_collected():
    state = gc_state()
    register_worker(state, "w:1")
    job = create_job(state, register_dataset(state), OFF, job_name="j")
    joined = join(state, job, now=0.0)
    client_heartbeat(state, joined.client_id, task_ids(joined), now=0.1)
    release(state, joined.client_id, 0.2)
    state.tick(now=5.0)
    iteration = state.records.iterations[joined.iteration_id]
    assert iteration.finished
    assert not iteration.collected
    assert join(state, job, now=5.1).iteration_id == joined.iteration_id


@pytest.mark.parametrize("gc_dynamic", [False, True])
def test_dynamic_jobs_are_kept_unless_gc_dynamic_sharding_jobs(gc_dynamic):
    state = gc_state(gc_dynamic_sharding_jobs=gc_dynamic)
    _, job, joined = abandoned(state, DYNAMIC, now=0.0)
    state.tick(now=100.0)
    assert state.records.iterations[joined.iteration_id].collected is gc_dynamic
    assert (join(state, job, now=100.1).iteration_id == joined.iteration_id) is not (
        gc_dynamic
    )


def test_a_dealt_job_a_rank_never_came_to_is_collected():
    """Its ranks' streams are fixed: a fresh iteration deals them again."""
    state = gc_state()
    _, job, joined = abandoned(state, DYNAMIC, now=0.0, num_consumers=2)
    assert state.records.jobs[job].dealt
    state.tick(now=100.0)
    assert state.records.iterations[joined.iteration_id].collected
    assert not state.records.tasks


def test_collected_iterations_get_no_tasks_from_new_workers():
    state = gc_state()
    abandoned(state, now=0.0)
    state.tick(now=2.0)
    late = register_worker(state, "w:2", now=2.1)
    assert late.tasks == []
    assert state.status()["jobs"][0]["num_iterations"] == 0
