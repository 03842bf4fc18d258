"""``DispatcherState`` driven directly: no sockets, a fake clock (``now=``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.splits import next_split_request
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dataset.specs import decode_spec, encode_spec
from zmqdata._dispatcher.splits import MAX_SPLITS_PER_REQUEST, split_size
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

OFF, DYNAMIC = 0, 1
WORKER_TIMEOUT_S = 1.0
CLIENT_TIMEOUT_S = 2.0
CLIENT = b"client"


def pipeline(ds: zd.Dataset) -> bytes:
    return graph.serialize(ds._node)


RANGE_10 = pipeline(zd.Dataset.range(10))
RANGE_20 = pipeline(zd.Dataset.range(20))
FOREVER = pipeline(zd.Dataset.range(3).repeat())


def make_state() -> DispatcherState:
    """A state with short worker and client timeouts (``*_TIMEOUT_S``)."""
    return DispatcherState(
        DispatcherConfig(
            worker_timeout_ms=int(WORKER_TIMEOUT_S * 1000),
            client_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
        )
    )


@pytest.fixture
def state() -> DispatcherState:
    return make_state()


def send(
    state: DispatcherState, message: m.Message, peer: bytes = CLIENT, now: float = 0.0
) -> list[tuple[bytes, m.Message]]:
    return state.handle(peer, message, now)


def reply(
    state: DispatcherState, message: m.Message, peer: bytes = CLIENT, now: float = 0.0
) -> Any:
    """The one answer to ``peer`` (other peers' messages are ignored)."""
    answers = [msg for to, msg in send(state, message, peer, now) if to == peer]
    assert len(answers) == 1, answers
    return answers[0]


def error(
    state: DispatcherState, message: m.Message, peer: bytes = CLIENT, now: float = 0.0
) -> m.Error:
    answer = reply(state, message, peer, now)
    assert isinstance(answer, m.Error), answer
    assert answer.request_id == message.request_id
    return answer


def register_worker(
    state: DispatcherState, name: str, now: float = 0.0, peer: bytes | None = None
) -> m.RegisterWorkerReply:
    answer = reply(
        state,
        m.RegisterWorker(
            request_id=1, worker_address=name, data_address=f"tcp://{name}"
        ),
        peer=name.encode() if peer is None else peer,
        now=now,
    )
    assert isinstance(answer, m.RegisterWorkerReply)
    return answer


def heartbeat(
    state: DispatcherState,
    name: str,
    worker_id: int,
    tasks: list[list[Any]],
    now: float = 0.0,
) -> Any:
    return reply(
        state,
        m.WorkerHeartbeat(request_id=2, worker_id=worker_id, tasks=tasks),
        peer=name.encode(),
        now=now,
    )


def register_dataset(
    state: DispatcherState, data: bytes = RANGE_10, dataset_id: str | None = None
) -> str:
    answer = reply(
        state,
        m.GetOrRegisterDataset(request_id=3, pipeline=data, dataset_id=dataset_id),
    )
    assert isinstance(answer, m.GetOrRegisterDatasetReply), answer
    return answer.dataset_id


def create_job(
    state: DispatcherState,
    dataset_id: str,
    mode: int = OFF,
    job_name: str | None = None,
    **extra: Any,
) -> int:
    answer = reply(
        state,
        m.GetOrCreateJob(
            request_id=4,
            dataset_id=dataset_id,
            processing_mode=mode,
            job_name=job_name,
            **extra,
        ),
    )
    assert isinstance(answer, m.GetOrCreateJobReply), answer
    return answer.job_id


def join(
    state: DispatcherState, job_id: int, repetition: int = 0, now: float = 0.0
) -> m.IterationState:
    answer = reply(
        state,
        m.GetOrCreateIteration(request_id=5, job_id=job_id, repetition=repetition),
        now=now,
    )
    assert isinstance(answer, m.IterationState), answer
    return answer


def client_heartbeat(
    state: DispatcherState, client_id: int, finished: list[int] = (), now: float = 0.0
) -> Any:
    return reply(
        state,
        m.ClientHeartbeat(
            request_id=6, client_id=client_id, finished_tasks=list(finished)
        ),
        now=now,
    )


def task_ids(answer: m.IterationState) -> list[int]:
    return sorted(t["task_id"] for t in answer.tasks)


# ------------------------------------------------------------------ workers


def test_workers_get_distinct_ids_and_time_out(state):
    a = register_worker(state, "a:1", now=0.0)
    b = register_worker(state, "b:1", now=0.5)
    assert a.worker_id != b.worker_id
    assert heartbeat(state, "a:1", a.worker_id, [], now=0.9).request_id == 2
    state.tick(now=1.2)  # b silent for 0.7 s, a for 0.3 s
    assert sorted(w.worker_address for w in state.records.workers.values()) == [
        "a:1",
        "b:1",
    ]
    state.tick(now=1.6)  # b silent for 1.1 s
    assert [w.worker_address for w in state.records.workers.values()] == ["a:1"]
    state.tick(now=2.0)
    assert state.records.workers == {}


def test_heartbeat_of_an_unknown_worker_asks_it_to_register_again(state):
    a = register_worker(state, "a:1")
    state.tick(now=5.0)
    answer = heartbeat(state, "a:1", a.worker_id, [], now=5.0)
    assert isinstance(answer, m.Error)
    assert answer.code == "NOT_FOUND"
    assert register_worker(state, "a:1", now=5.1).worker_id != a.worker_id


def test_reregistering_an_address_replaces_the_old_worker(state):
    old = register_worker(state, "a:1")
    job = create_job(state, register_dataset(state))
    [old_task] = task_ids(join(state, job))
    again = register_worker(state, "a:1", now=0.05)  # a retry: the same worker
    assert again.worker_id == old.worker_id
    assert [t["task_id"] for t in again.tasks] == [old_task]
    new = register_worker(state, "a:1", now=0.1, peer=b"restarted")
    assert list(state.records.workers) == [new.worker_id]
    [new_task] = [t["task_id"] for t in new.tasks]
    assert new_task != old_task
    assert old.worker_id not in state.records.workers


@pytest.mark.parametrize(
    ("data_address", "inproc_address"),
    [
        ("not an endpoint", ""),
        ("tcp://host-without-port", ""),
        ("tcp://h:0", ""),
        ("udp://h:1", ""),
        ("tcp://", ""),
        ("tcp://h:1", "garbage"),
    ],
)
def test_worker_with_a_bad_endpoint_is_refused(state, data_address, inproc_address):
    answer = error(
        state,
        m.RegisterWorker(
            request_id=1,
            worker_address="w:1",
            data_address=data_address,
            inproc_address=inproc_address,
        ),
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert state.records.workers == {}


def test_status_lists_workers_with_their_task_counts(state):
    register_worker(state, "a:1")
    job = create_job(state, register_dataset(state))
    join(state, job)
    answer = reply(state, m.GetStatus(request_id=9))
    assert isinstance(answer, m.GetStatusReply)
    [worker] = answer.status["workers"]
    assert (worker["address"], worker["num_tasks"]) == ("a:1", 1)


# ------------------------------------------------------------------ datasets


def test_equal_pipelines_share_one_dataset_id(state):
    first = register_dataset(state, RANGE_10)
    assert register_dataset(state, pipeline(zd.Dataset.range(10))) == first
    assert register_dataset(state, RANGE_20) != first
    assert len(state.records.datasets) == 2


def test_requested_dataset_id_is_kept_and_reregistering_is_a_noop(state):
    assert register_dataset(state, RANGE_10, dataset_id="mine") == "mine"
    assert register_dataset(state, RANGE_10, dataset_id="mine") == "mine"
    assert register_dataset(state, RANGE_10) == "mine"  # found by fingerprint
    assert list(state.records.datasets) == ["mine"]


def test_requested_id_with_a_different_pipeline_is_an_invalid_argument(state):
    register_dataset(state, RANGE_10, dataset_id="mine")
    answer = error(
        state,
        m.GetOrRegisterDataset(request_id=7, pipeline=RANGE_20, dataset_id="mine"),
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert "'mine'" in answer.message
    assert state.records.datasets["mine"].pipeline == RANGE_10


def test_the_same_pipeline_with_another_compression_is_another_dataset(state):
    def register(compression: str | None, dataset_id: str | None = None) -> m.Message:
        request = m.GetOrRegisterDataset(
            request_id=8,
            pipeline=RANGE_10,
            compression=compression,
            dataset_id=dataset_id,
        )
        return reply(state, request)

    auto = register("AUTO")
    plain = register(None)
    assert isinstance(auto, m.GetOrRegisterDatasetReply)
    assert isinstance(plain, m.GetOrRegisterDatasetReply)
    assert auto.dataset_id != plain.dataset_id
    assert register("AUTO") == auto  # found again, with its own compression
    datasets = state.records.datasets
    assert datasets[auto.dataset_id].compression == "AUTO"
    assert datasets[plain.dataset_id].compression is None
    refused = register(None, dataset_id=auto.dataset_id)
    assert isinstance(refused, m.Error)
    assert refused.code == "INVALID_ARGUMENT"
    assert "compression='AUTO', not None" in refused.message


def test_generated_ids_never_reuse_a_requested_id(state):
    requested = [register_dataset(state, RANGE_10, dataset_id=str(i)) for i in (1, 2)]
    others = [register_dataset(state, pipeline(zd.Dataset.range(n))) for n in (3, 4)]
    assert len(set(requested + others)) == 4
    assert state.records.datasets["1"].pipeline == RANGE_10
    assert len(state.records.datasets) == 4


def test_dataset_info_returns_the_spec_and_unknown_ids_are_not_found(state):
    spec = zd.Dataset.range(3).element_spec
    answer = reply(
        state,
        m.GetOrRegisterDataset(
            request_id=1, pipeline=RANGE_10, element_spec=encode_spec(spec)
        ),
    )
    info = reply(state, m.GetDatasetInfo(request_id=2, dataset_id=answer.dataset_id))
    assert isinstance(info, m.GetDatasetInfoReply)
    assert decode_spec(info.element_spec) == spec
    missing = error(state, m.GetDatasetInfo(request_id=3, dataset_id="nope"))
    assert missing.code == "NOT_FOUND"
    assert "'nope'" in missing.message


def test_garbage_pipeline_is_answered_with_an_error(state):
    answer = error(state, m.GetOrRegisterDataset(request_id=4, pipeline=b"\xc1garbage"))
    assert answer.code == "INVALID_ARGUMENT"
    assert state.records.datasets == {}


# ------------------------------------------------------------------ jobs


def test_anonymous_jobs_are_always_new(state):
    dataset_id = register_dataset(state)
    assert create_job(state, dataset_id) != create_job(state, dataset_id)


def test_same_job_name_gives_the_same_job(state):
    dataset_id = register_dataset(state)
    job = create_job(state, dataset_id, job_name="shared")
    assert create_job(state, dataset_id, job_name="shared") == job
    assert create_job(state, dataset_id, job_name="other") != job


def test_same_job_name_with_different_parameters_is_an_error(state):
    dataset_id = register_dataset(state, FOREVER)
    create_job(state, dataset_id, OFF, job_name="shared")
    for changed in (
        {"processing_mode": DYNAMIC},
        {"target_workers": "LOCAL"},
        {"num_consumers": 2},
    ):
        request = m.GetOrCreateJob(
            request_id=8,
            dataset_id=dataset_id,
            **{"processing_mode": OFF, "job_name": "shared", **changed},
        )
        answer = error(state, request)
        assert answer.code == "INVALID_ARGUMENT"
        assert "'shared'" in answer.message
        assert "different parameters" in answer.message
    assert len(state.records.jobs) == 1


def test_job_for_an_unknown_dataset_is_not_found(state):
    answer = error(
        state, m.GetOrCreateJob(request_id=1, dataset_id="17", processing_mode=OFF)
    )
    assert answer.code == "NOT_FOUND"
    assert "'17'" in answer.message


def test_dynamic_job_needs_a_splittable_source(state):
    gen = pipeline(zd.Dataset.from_generator(lambda: iter([1, 2])))
    dataset_id = register_dataset(state, gen)
    answer = error(
        state,
        m.GetOrCreateJob(request_id=1, dataset_id=dataset_id, processing_mode=DYNAMIC),
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert "from_generator" in answer.message
    assert create_job(state, dataset_id, OFF) > 0  # OFF needs no splits


# ------------------------------------------------------------------ iterations


def test_kth_iteration_of_a_named_job_is_shared(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state)
    job = create_job(state, dataset_id, job_name="shared")
    first = join(state, job, repetition=0)
    again = join(state, create_job(state, dataset_id, job_name="shared"), repetition=0)
    second = join(state, job, repetition=1)
    assert first.iteration_id == again.iteration_id != second.iteration_id
    assert task_ids(first) == task_ids(again)
    assert set(task_ids(first)).isdisjoint(task_ids(second))
    assert first.client_id != again.client_id


def test_new_iteration_pushes_tasks_to_every_worker(state):
    a = register_worker(state, "a:1")
    b = register_worker(state, "b:1")
    job = create_job(state, register_dataset(state))
    out = send(state, m.GetOrCreateIteration(request_id=5, job_id=job, repetition=0))
    pushed = {peer: msg for peer, msg in out if isinstance(msg, m.ProcessTask)}
    assert set(pushed) == {b"a:1", b"b:1"}
    [answer] = [msg for peer, msg in out if peer == CLIENT]
    by_worker = {t["worker_id"]: t["task_id"] for t in answer.tasks}
    assert set(by_worker) == {a.worker_id, b.worker_id}
    assert pushed[b"a:1"].tasks[0]["task_id"] == by_worker[a.worker_id]
    assert pushed[b"a:1"].tasks[0]["pipeline"] == RANGE_10


def test_iteration_of_an_unknown_job_is_not_found(state):
    assert error(state, m.GetOrCreateIteration(job_id=99, repetition=0)).code == (
        "NOT_FOUND"
    )


def test_worker_registered_later_gets_tasks_of_unfinished_iterations(state):
    job = create_job(state, register_dataset(state))
    joined = join(state, job)
    assert joined.tasks == []
    assert not joined.finished  # no worker yet: nothing ran, nothing finished
    late = register_worker(state, "late:1", now=0.2)
    [task] = late.tasks
    assert task["iteration_id"] == joined.iteration_id
    seen = client_heartbeat(state, joined.client_id, now=0.3)
    assert task_ids(seen) == [task["task_id"]]
    assert seen.tasks[0]["data_address"] == "tcp://late:1"


def test_worker_heartbeat_diffs_new_tasks_and_tasks_to_delete(state):
    a = register_worker(state, "a:1")
    job = create_job(state, register_dataset(state))
    [task] = task_ids(join(state, job))
    first = heartbeat(state, "a:1", a.worker_id, [])
    assert [t["task_id"] for t in first.new_tasks] == [task]
    running = heartbeat(state, "a:1", a.worker_id, [[task, False]])
    assert running.new_tasks == []
    assert running.tasks_to_delete == []
    stale = heartbeat(state, "a:1", a.worker_id, [[task, False], [12345, False]])
    assert stale.tasks_to_delete == [12345]


def test_a_worker_gets_a_pipeline_it_holds_without_it(state):
    a = register_worker(state, "a:1")
    fingerprint = graph.fingerprint(RANGE_10)
    held = m.WorkerHeartbeat(
        request_id=2, worker_id=a.worker_id, pipelines=[fingerprint]
    )
    reply(state, held, peer=b"a:1")
    first = create_job(state, register_dataset(state))
    out = send(state, m.GetOrCreateIteration(request_id=5, job_id=first, repetition=0))
    [pushed] = [msg for peer, msg in out if peer == b"a:1"]
    assert [(t["pipeline"], t["fingerprint"]) for t in pushed.tasks] == [
        (b"", fingerprint)
    ]
    # A worker that no longer says it holds it gets it again, with its task.
    again = heartbeat(state, "a:1", a.worker_id, [])
    assert [(t["pipeline"], t["fingerprint"]) for t in again.new_tasks] == [
        (RANGE_10, fingerprint)
    ]


@pytest.mark.parametrize(
    "pipelines", [["f"] * (m.MAX_PIPELINES_HELD + 1), ["f" * 65], [7]]
)
def test_a_heartbeat_naming_too_many_pipelines_is_refused(state, pipelines):
    worker = register_worker(state, "a:1")
    hostile = m.WorkerHeartbeat(
        request_id=1, worker_id=worker.worker_id, pipelines=pipelines
    )
    assert error(state, hostile, peer=b"a:1").code == "INVALID_ARGUMENT"
    assert worker.worker_id not in state.held_pipelines


def test_iteration_finishes_when_all_its_tasks_finish(state):
    a = register_worker(state, "a:1")
    b = register_worker(state, "b:1")
    job = create_job(state, register_dataset(state))
    joined = join(state, job)
    tasks = {t["worker_id"]: t["task_id"] for t in joined.tasks}
    heartbeat(state, "a:1", a.worker_id, [[tasks[a.worker_id], True]])
    assert not client_heartbeat(state, joined.client_id).finished
    # A consumer's report of end of sequence counts as well.
    done = client_heartbeat(state, joined.client_id, [tasks[b.worker_id]])
    assert done.finished
    status = reply(state, m.GetStatus()).status
    assert status["jobs"][0]["finished"] is True


def test_finished_iteration_without_consumers_drops_its_tasks(state):
    a = register_worker(state, "a:1")
    job = create_job(state, register_dataset(state), job_name="j")
    joined = join(state, job)
    [task] = task_ids(joined)
    heartbeat(state, "a:1", a.worker_id, [[task, True]])
    reply(state, m.ReleaseIterationClient(client_id=joined.client_id))
    assert heartbeat(state, "a:1", a.worker_id, [[task, True]]).tasks_to_delete == [
        task
    ]
    late = join(state, job)  # arriving after iteration 0 was drained
    assert late.finished
    assert late.tasks == []


def test_lost_worker_removes_its_tasks_and_the_rest_can_finish(state):
    a = register_worker(state, "a:1", now=0.0)
    b = register_worker(state, "b:1", now=0.0)
    job = create_job(state, register_dataset(state))
    joined = join(state, job)
    tasks = {t["worker_id"]: t["task_id"] for t in joined.tasks}
    heartbeat(state, "a:1", a.worker_id, [[tasks[a.worker_id], True]], now=0.9)
    client_heartbeat(state, joined.client_id, now=0.9)
    state.tick(now=1.5)  # b silent for 1.5 s
    assert b.worker_id not in state.records.workers
    seen = client_heartbeat(state, joined.client_id, now=1.5)
    assert task_ids(seen) == [tasks[a.worker_id]]
    assert seen.finished


def test_a_dispatcher_that_stood_still_counts_silence_from_when_it_woke(state):
    worker = register_worker(state, "a:1", now=0.0)
    joined = join(state, create_job(state, register_dataset(state)), now=0.0)
    state.resumed(now=5.0)  # its loop ticked 5 s late: it, not its peers, was still
    state.tick(now=5.0)
    assert worker.worker_id in state.records.workers
    assert joined.client_id in state.records.clients
    state.tick(now=5.0 + CLIENT_TIMEOUT_S + 0.1)  # silent since it woke: gone
    assert (state.records.workers, state.records.clients) == ({}, {})


def test_silent_clients_time_out(state):
    job = create_job(state, register_dataset(state))
    early = join(state, job, now=0.0)
    late = join(state, create_job(state, register_dataset(state)), now=1.0)
    state.tick(now=2.5)
    assert early.client_id not in state.records.clients
    assert late.client_id in state.records.clients
    answer = error(state, m.ClientHeartbeat(request_id=3, client_id=early.client_id))
    assert answer.code == "NOT_FOUND"
    state.tick(now=3.5)
    assert state.records.clients == {}


def test_release_forgets_the_client(state):
    joined = join(state, create_job(state, register_dataset(state)))
    assert isinstance(
        reply(
            state, m.ReleaseIterationClient(request_id=4, client_id=joined.client_id)
        ),
        m.Ok,
    )
    assert state.records.clients == {}
    # Releasing twice is harmless.
    reply(state, m.ReleaseIterationClient(request_id=5, client_id=joined.client_id))


# ------------------------------------------------------------------ splits


def get_split(
    state: DispatcherState, iteration_id: int, repetition: int = 0, task: int = 0
) -> m.GetSplitReply:
    """The next split of the iteration's ``task``-th task."""
    answer = reply(state, next_split_request(state, iteration_id, repetition, task))
    assert isinstance(answer, m.GetSplitReply), answer
    return answer


def all_splits(
    state: DispatcherState, iteration_id: int, repetition: int = 0
) -> list[Any]:
    splits = []
    while not (answer := get_split(state, iteration_id, repetition)).end_of_splits:
        splits.extend(answer.splits)
        assert len(splits) < 10_000
    return splits


def covered(splits: list[Any]) -> list[int]:
    return sorted(i for _, lo, hi in splits for i in range(lo, hi))


def test_split_size_is_bounded():
    assert split_size(0) == split_size(10) == 1
    assert split_size(64 * 10) == 10
    assert split_size(10**9) == 256


def test_each_split_is_handed_out_once_per_repetition(state):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state, pipeline(zd.Dataset.range(1000)))
    iteration = join(state, create_job(state, dataset_id, DYNAMIC)).iteration_id
    first = all_splits(state, iteration, 0)
    assert covered(first) == list(range(1000))
    assert get_split(state, iteration, 0).end_of_splits  # stays at the end
    again = all_splits(state, iteration, 1)
    assert covered(again) == list(range(1000))
    # A worker still on the old repetition is told it is over.
    assert get_split(state, iteration, 0).end_of_splits


def test_two_workers_share_the_splits_of_a_repetition(state):
    register_worker(state, "a:1")
    register_worker(state, "b:1")
    dataset_id = register_dataset(state, RANGE_20)
    iteration = join(state, create_job(state, dataset_id, DYNAMIC)).iteration_id
    taken: dict[int, list[Any]] = {0: [], 1: []}
    ended: set[int] = set()
    while ended != {0, 1}:
        for task in (0, 1):
            answer = get_split(state, iteration, 0, task=task)
            if answer.end_of_splits:
                ended.add(task)
            else:
                taken[task].extend(answer.splits)
    assert taken[0]
    assert taken[1]
    assert covered(taken[0] + taken[1]) == list(range(20))


def test_a_retried_split_request_gets_the_same_split_again(state):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state, RANGE_20)
    iteration = join(state, create_job(state, dataset_id, DYNAMIC)).iteration_id
    first = next_split_request(state, iteration)
    answer = reply(state, first)
    for _ in range(3):  # sent again after a stall: the same split, none consumed
        assert reply(state, first) == answer
    later = reply(state, next_split_request(state, iteration))
    assert isinstance(later, m.GetSplitReply)
    assert covered([*answer.splits, *later.splits]) == list(range(2))
    stale = error(state, first)  # superseded by a later request of the task
    assert stale.code == "FAILED_PRECONDITION"
    assert covered(all_splits(state, iteration)) == list(range(2, 20))


def test_a_request_gets_up_to_max_splits_consecutive_splits(state):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state, RANGE_20)
    iteration = join(state, create_job(state, dataset_id, DYNAMIC)).iteration_id
    request = dataclasses.replace(next_split_request(state, iteration), max_splits=8)
    answer = reply(state, request)
    assert answer.splits == [[0, i, i + 1] for i in range(8)]
    assert reply(state, request) == answer  # a retry: the same 8, none consumed
    rest = dataclasses.replace(next_split_request(state, iteration), max_splits=50)
    assert covered(reply(state, rest).splits) == list(range(8, 14))  # half of 12 left
    assert covered(all_splits(state, iteration)) == list(range(14, 20))


@pytest.mark.parametrize("max_splits", [0, -1, MAX_SPLITS_PER_REQUEST + 1])
def test_max_splits_out_of_range_is_refused(state, max_splits):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state, RANGE_20)
    iteration = join(state, create_job(state, dataset_id, DYNAMIC)).iteration_id
    request = next_split_request(state, iteration)
    refused = error(state, dataclasses.replace(request, max_splits=max_splits))
    assert refused.code == "INVALID_ARGUMENT"
    assert str(max_splits) in refused.message
    assert covered(all_splits(state, iteration)) == list(range(20))  # none lost


def test_iterations_have_their_own_splits(state):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state, RANGE_10)
    job = create_job(state, dataset_id, DYNAMIC, job_name="j")
    first = join(state, job, 0).iteration_id
    second = join(state, job, 1).iteration_id
    assert covered(all_splits(state, first)) == list(range(10))
    assert covered(all_splits(state, second)) == list(range(10))


def test_get_split_errors(state):
    missing = error(state, m.GetSplit(request_id=1, iteration_id=999, repetition=0))
    assert missing.code == "NOT_FOUND"
    gen = register_dataset(state, pipeline(zd.Dataset.from_generator(lambda: [1])))
    iteration = join(state, create_job(state, gen, OFF)).iteration_id
    unsplittable = error(
        state, m.GetSplit(request_id=2, iteration_id=iteration, repetition=0)
    )
    assert unsplittable.code == "INVALID_ARGUMENT"


# ------------------------------------------------------------------ bad requests


@pytest.mark.parametrize(
    "message",
    [
        m.Ok(request_id=1),
        m.Error(request_id=2, code="NOT_FOUND", message="x"),
        m.GetElements(request_id=3, task_id=1, client_id=1, max_elements=1),
        m.Elements(request_id=4, task_id=1, count=0),
        m.IterationState(
            request_id=5, client_id=1, iteration_id=1, tasks=[], finished=True
        ),
    ],
    ids=lambda msg: msg.TYPE,
)
def test_messages_that_are_not_requests_get_an_error(state, message):
    answer = error(state, message)
    assert answer.code == "INVALID_ARGUMENT"
    assert message.TYPE in answer.message


@pytest.mark.parametrize(
    "message",
    [
        m.WorkerHeartbeat(request_id=1, worker_id=1, tasks=[[1]]),
        m.WorkerHeartbeat(request_id=2, worker_id=1, tasks=[["x", "y", "z"]]),
        m.ClientHeartbeat(request_id=3, client_id=-1),
        m.GetOrCreateJob(request_id=4, dataset_id="", processing_mode=7),
        m.GetSplit(request_id=5, iteration_id=-3, repetition=-1),
        m.ReleaseIterationClient(request_id=6, client_id=10**12),
    ],
    ids=lambda msg: msg.TYPE,
)
def test_malformed_requests_never_raise(state, message):
    worker = register_worker(state, "a:1")
    answers = send(state, message, peer=b"hostile")
    assert [peer for peer, _ in answers] == [b"hostile"]
    assert isinstance(answers[0][1], m.Error | m.Ok)
    # Nothing was half-applied: the worker is still reached at its own peer.
    assert state.records.workers[worker.worker_id].peer == b"a:1"
    job = create_job(state, register_dataset(state))
    out = send(state, m.GetOrCreateIteration(request_id=5, job_id=job, repetition=0))
    assert [peer for peer, _ in out] == [CLIENT, b"a:1"]


@pytest.mark.parametrize("tasks", [[[1]], [["x", True]], [[1, "done"]], [7]])
def test_malformed_worker_heartbeat_is_an_invalid_argument(state, tasks):
    worker = register_worker(state, "a:1")
    answer = error(
        state,
        m.WorkerHeartbeat(request_id=1, worker_id=worker.worker_id, tasks=tasks),
        peer=b"hostile",
    )
    assert answer.code == "INVALID_ARGUMENT"
    assert state.records.workers[worker.worker_id].peer == b"a:1"


def test_status_shape(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state)
    create_job(state, dataset_id, DYNAMIC, job_name="named")
    status = reply(state, m.GetStatus()).status
    assert [d["dataset_id"] for d in status["datasets"]] == [dataset_id]
    [job] = status["jobs"]
    assert job["job_name"] == "named"
    assert job["dataset_id"] == dataset_id
    assert job["processing_mode"] == "distributed_epoch"
    assert job["num_consumers"] is None
    assert job["finished"] is False


def test_a_retried_job_or_iteration_request_creates_nothing_new(state):
    register_worker(state, "w:1")
    dataset_id = register_dataset(state)
    request = m.GetOrCreateJob(request_id=1, dataset_id=dataset_id, processing_mode=OFF)
    first = reply(state, request)
    assert reply(state, request).job_id == first.job_id  # unnamed, yet the same
    assert reply(state, dataclasses.replace(request, request_key=b"other")).job_id != (
        first.job_id
    )
    join_request = m.GetOrCreateIteration(job_id=first.job_id, repetition=0)
    joined = reply(state, join_request)
    assert reply(state, join_request).client_id == joined.client_id
    assert len(state.records.clients) == 1


def test_local_jobs_give_tasks_only_to_their_consumers_processes(state):
    for name, process in (("a:1", "p1"), ("b:1", "p2")):
        reply(
            state,
            m.RegisterWorker(
                worker_address=name, data_address=f"tcp://{name}", local_process=process
            ),
            peer=name.encode(),
        )
    dataset_id = register_dataset(state, RANGE_20)
    job_id = create_job(
        state, dataset_id, DYNAMIC, "j", target_workers="LOCAL", local_process="p1"
    )
    [task] = join(state, job_id).tasks
    assert task["worker_address"] == "a:1"
    out = send(
        state,
        m.GetOrCreateJob(
            dataset_id=dataset_id,
            processing_mode=DYNAMIC,
            job_name="j",
            target_workers="LOCAL",
            local_process="p2",
        ),
    )
    pushed = [(peer, msg) for peer, msg in out if isinstance(msg, m.ProcessTask)]
    assert [peer for peer, _ in pushed] == [b"b:1"]
    assert len(join(state, job_id).tasks) == 2
