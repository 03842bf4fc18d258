"""Exactly once (DYNAMIC): a lost worker's unacknowledged keys, fenced, handed out again.

``DispatcherState`` driven with a fake clock. ``range(640)`` is cut into 64
splits of 10 elements; a key is ``repetition * STRIDE + index``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.test_journal import reopened
from tests.dispatcher.test_replay import RecordingState, replayed_and_loaded, tables
from tests.dispatcher.test_state import (
    DYNAMIC,
    OFF,
    create_job,
    error,
    heartbeat,
    join,
    pipeline,
    register_dataset,
    register_worker,
    reply,
    send,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.checks import MAX_ACKED_NUMBERS
from zmqdata._dispatcher.journal import Journal, JournalSink
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Ranges, key

pytestmark = pytest.mark.timeout(30)

RANGE_640 = pipeline(zd.Dataset.range(640))
TWICE = pipeline(zd.Dataset.range(640).repeat(2))
CONFIG = DispatcherConfig(worker_timeout_ms=1_000, client_timeout_ms=10_000)


@dataclass
class Read:
    """A tracked DYNAMIC read: workers ``a:1`` and ``b:1``, clients reading it."""

    state: DispatcherState
    iteration_id: int
    tasks: dict[str, int]
    """Worker address -> its task id."""
    clients: list[int]
    requests: dict[int, int]
    """Task id -> its last split request id."""

    def ask(
        self,
        task_id: int,
        max_splits: int = 1,
        repetition: int = 0,
        again: bool = False,
    ) -> m.GetSplitReply:
        """Task ``task_id``'s next split request (``again``: its last one, resent)."""
        request_id = self.requests.get(task_id, 0) + (0 if again else 1)
        self.requests[task_id] = request_id
        split = m.GetSplit(
            request_id=request_id,
            iteration_id=self.iteration_id,
            repetition=repetition,
            task_id=task_id,
            max_splits=max_splits,
        )
        answer = reply(self.state, split, peer=b"w")
        assert isinstance(answer, m.GetSplitReply), answer
        return answer

    def rest(self, task_id: int) -> list[list[int]]:
        """Task ``task_id`` asks for splits, 256 at a time, to the end; what it got."""
        got: list[list[int]] = []
        while not (answer := self.ask(task_id, max_splits=256)).end_of_splits:
            got += answer.splits
        return got

    def heartbeat(self, client: int, now: float = 0.5, **fields: Any) -> Any:
        """Client number ``client``'s heartbeat; every message sent in answer."""
        message = m.ClientHeartbeat(client_id=self.clients[client], **fields)
        return send(self.state, message, now=now)

    def lose(self, address: str, now: float = 1.5) -> list[tuple[bytes, m.Message]]:
        """Worker ``address`` times out (the others and the readers heartbeat).

        Returns what the tick sends.
        """
        for other in self.tasks:
            if other != address and other in self.workers():
                heartbeat(self.state, other, self.workers()[other], [], now=now - 0.6)
        for client in self.clients:
            if client in self.records.clients:
                self.state.liveness.heard_client(client, now)
        return self.state.tick(now=now)

    def workers(self) -> dict[str, int]:
        return {w.worker_address: w.worker_id for w in self.records.workers.values()}

    @property
    def records(self) -> ClusterRecords:
        return self.state.records

    @property
    def iteration(self) -> Any:
        return self.records.iterations[self.iteration_id]

    def unacked(self, address: str) -> list[int]:
        return list(self.records.tasks[self.tasks[address]].unacked)


def start(
    state: DispatcherState,
    data: bytes = RANGE_640,
    clients: int = 1,
    workers: tuple[str, ...] = ("a:1", "b:1"),
    **job: Any,
) -> Read:
    """``workers`` and ``clients`` consumers of a named tracked DYNAMIC job."""
    for address in workers:
        register_worker(state, address)
    dataset_id = register_dataset(state, data)
    job_id = create_job(state, dataset_id, DYNAMIC, job_name="shared", **job)
    joined = [join(state, job_id) for _ in range(clients)]
    tasks = {t["worker_address"]: t["task_id"] for t in joined[0].tasks}
    ids = [j.client_id for j in joined]
    return Read(state, joined[0].iteration_id, tasks, ids, {})


def state_of(out: list[tuple[bytes, m.Message]]) -> m.IterationState:
    [answer] = [msg for _, msg in out if isinstance(msg, m.IterationState)]
    return answer


def pushed(out: list[tuple[bytes, m.Message]]) -> list[tuple[bytes, dict[str, Any]]]:
    return [
        (p, t) for p, msg in out if isinstance(msg, m.ProcessTask) for t in msg.tasks
    ]


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(CONFIG)


# ------------------------------------------------------------------ acks


def test_split_keys_are_unacknowledged_until_a_consumer_acks_them(state):
    read = start(state)
    a = read.tasks["a:1"]
    assert read.ask(a, max_splits=2).splits == [[0, 0, 10], [0, 10, 20]]
    assert read.unacked("a:1") == [0, 20]
    state_of(read.heartbeat(0, acked=[[a, 0, 5, 12, 15]]))
    assert read.unacked("a:1") == [5, 12, 15, 20]
    events = len(state.log)
    for acked in ([[a, 0, 5]], [[9_999, 5, 12]], [[a, 100, 200]]):  # no change
        state_of(read.heartbeat(0, acked=acked))
    assert len(state.log) == events
    assert isinstance(state.log[-1], ev.RangesAcked)


def test_untracked_jobs_are_unchanged(state):
    read = start(state, exactly_once=False)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    assert not read.records.jobs[read.iteration.job_id].exactly_once
    assert read.ask(a, max_splits=2).splits == [[0, 0, 10], [0, 10, 20]]
    assert read.unacked("a:1") == []
    read.heartbeat(0, acked=[[a, 0, 20]])
    read.lose("a:1")
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [])
    assert read.iteration.task_epoch == 0
    assert read.rest(b)[0] == [0, 20, 30]  # at most once
    assert state_of(read.heartbeat(0, finished_tasks=[b])).finished
    assert {type(e) for e in state.log}.isdisjoint(
        {ev.RangesAcked, ev.RangesHanded, ev.ClientFenced, ev.IterationResumed}
    )


def test_only_dynamic_jobs_track_and_workers_are_told(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, RANGE_640)
    off = create_job(state, dataset_id, OFF)
    assert not state.records.jobs[off].exactly_once  # DYNAMIC only
    job_request = m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC)
    job_id = reply(state, job_request).job_id
    out = send(state, m.GetOrCreateIteration(job_id=job_id, repetition=0))
    [(peer, task)] = pushed(out)
    assert (peer, task["exactly_once"]) == (b"a:1", True)
    untracked = create_job(state, dataset_id, DYNAMIC, exactly_once=False)
    [(_, task)] = pushed(
        send(state, m.GetOrCreateIteration(job_id=untracked, repetition=0))
    )
    assert task["exactly_once"] is False


def test_a_named_job_is_shared_only_with_the_same_exactly_once(state):
    dataset_id = register_dataset(state, RANGE_640)
    create_job(state, dataset_id, DYNAMIC, job_name="j")
    request = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=DYNAMIC, job_name="j", exactly_once=False
    )
    assert "exactly_once=False" in error(state, request).message


# ------------------------------------------------------------------ lost workers


def test_a_lost_tasks_keys_wait_for_every_reader_then_go_to_another_task(state):
    read = start(state, clients=2)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=2)  # keys 0..20
    assert read.ask(b).splits == [[0, 20, 30]]
    read.heartbeat(0, acked=[[a, 0, 5]])
    read.lose("a:1")
    iteration = read.iteration
    assert iteration.task_epoch == 1
    assert iteration.orphans == {
        a: {"keys": [5, 20], "waiting": read.clients, "epoch": 1}
    }
    assert read.ask(b).splits == [[0, 30, 40]]  # nothing pending yet: fresh splits
    told = state_of(read.heartbeat(1, task_epoch=0))
    assert (told.task_epoch, [t["task_id"] for t in told.tasks]) == (1, [b])
    # Acks come with the fence and are applied first.
    read.heartbeat(0, acked=[[a, 5, 8]], task_epoch=1)
    assert iteration.orphans[a]["waiting"] == [read.clients[1]]
    assert iteration.orphans[a]["keys"] == [8, 20]
    assert read.state.status()["jobs"][0]["lost_keys"] == {"pending": 0, "orphaned": 12}
    read.heartbeat(1, acked=[[a, 8, 10]], task_epoch=1)
    assert (iteration.orphans, iteration.pending) == ({}, [10, 20])
    assert read.state.status()["jobs"][0]["lost_keys"] == {"pending": 10, "orphaned": 0}
    assert read.ask(b).splits == [[0, 10, 20]]  # exactly what nobody acknowledged
    assert iteration.pending == []
    assert read.unacked("b:1") == [10, 40]
    assert read.ask(b, again=True).splits == [[0, 10, 20]]  # a retry: the same
    assert read.ask(b).splits == [[0, 40, 50]]
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)


def test_pending_keys_are_handed_about_max_splits_worth_at_a_time(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=5)  # keys 0..50
    read.heartbeat(0, acked=[[a, 12, 14]])
    read.lose("a:1")
    read.heartbeat(0, task_epoch=1)
    assert read.iteration.pending == [0, 12, 14, 50]
    assert read.ask(b, max_splits=2).splits == [[0, 0, 10], [0, 10, 12], [0, 14, 22]]
    assert read.ask(b, max_splits=8).splits == [[0, 22, 32], [0, 32, 42], [0, 42, 50]]
    assert read.ask(b).splits == [[0, 50, 60]]


def test_a_released_client_stops_being_waited_for(state):
    read = start(state, clients=2)
    a = read.tasks["a:1"]
    read.ask(a)  # keys 0..10
    read.lose("a:1")
    read.heartbeat(0, task_epoch=1)
    assert read.iteration.orphans[a]["waiting"] == [read.clients[1]]
    release = m.ReleaseIterationClient(client_id=read.clients[1], acked=[[a, 0, 4]])
    assert isinstance(reply(state, release), m.Ok)
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [4, 10])


FENCE_TIMEOUT_S = CONFIG.fence_timeout_ms / 1000


def keep_ticking(read: Read, start: float, end: float) -> None:
    """Ticks every 0.5 s from ``start`` to ``end``; worker ``b:1`` heartbeats."""
    for step in range(int((end - start) / 0.5) + 1):
        now = start + 0.5 * step
        heartbeat(read.state, "b:1", read.workers()["b:1"], [], now=now)
        read.state.tick(now=now)


def test_a_silent_reader_is_not_waited_for_past_the_fence_timeout(state):
    read = start(state, clients=2)
    a = read.tasks["a:1"]
    read.ask(a)  # keys 0..10
    read.lose("a:1", now=1.5)  # reader 1 was last heard of then
    read.heartbeat(0, acked=[[a, 0, 4]], task_epoch=1, now=1.6)
    keep_ticking(read, 2.0, 1.5 + FENCE_TIMEOUT_S)
    assert read.iteration.orphans[a]["waiting"] == [read.clients[1]]
    keep_ticking(read, 2.0 + FENCE_TIMEOUT_S, 2.0 + FENCE_TIMEOUT_S)
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [4, 10])
    assert state.log[-1] == ev.ClientFenced(read.iteration_id, read.clients[1], 1)
    # Back late, it acknowledges keys handed out again: nothing changes.
    read.heartbeat(1, acked=[[a, 4, 6]], task_epoch=0, now=2.1 + FENCE_TIMEOUT_S)
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [4, 10])
    assert read.records.clients[read.clients[1]]  # still a reader
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)


def test_a_stalled_dispatcher_does_not_take_its_readers_for_silent(state):
    read = start(state, clients=2)
    a = read.tasks["a:1"]
    read.ask(a)
    read.lose("a:1", now=1.5)
    read.heartbeat(0, task_epoch=1, now=1.6)
    keep_ticking(read, 2.0, 5.0)
    stalled_until = 2.0 + FENCE_TIMEOUT_S  # past reader 1's fence timeout
    state.resumed(now=stalled_until)  # what the server's loop says when it wakes
    heartbeat(state, "b:1", read.workers()["b:1"], [], now=stalled_until)
    state.tick(now=stalled_until)
    assert read.iteration.orphans[a]["waiting"] == [read.clients[1]]
    read.heartbeat(1, task_epoch=1, now=stalled_until)  # it waited in the queue
    assert read.iteration.orphans == {}


def test_keys_all_acknowledged_need_no_fence(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a)
    read.lose("a:1")
    assert read.iteration.orphans
    read.heartbeat(0, acked=[[a, 0, 10]])  # no fence yet: the orphan is done
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [])
    assert read.rest(b)[0] == [0, 10, 20]
    assert state_of(read.heartbeat(0, finished_tasks=[b])).finished


def test_with_no_reader_a_lost_tasks_keys_are_pending_at_once(state):
    read = start(state, clients=1)
    a = read.tasks["a:1"]
    read.ask(a)
    reply(state, m.ReleaseIterationClient(client_id=read.clients[0]))
    read.lose("a:1")
    assert (read.iteration.orphans, read.iteration.pending) == ({}, [0, 10])


# ------------------------------------------------------------------ recovery


def test_a_recovery_task_when_every_other_task_is_finished(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=2)  # keys 0..20
    while not read.ask(b, max_splits=256).end_of_splits:
        pass
    read.heartbeat(0, acked=[[b, 20, 640]], finished_tasks=[b])
    read.lose("a:1")
    assert not read.iteration.finished  # the orphan is owed
    out = read.heartbeat(0, acked=[[a, 0, 3]], task_epoch=1)
    [(peer, task)] = pushed(out)
    recovery = task["task_id"]
    assert peer == b"b:1"
    assert recovery not in (a, b)
    told = state_of(out)
    assert [t["task_id"] for t in told.tasks] == [b, recovery]
    assert not told.finished
    assert read.ask(recovery, max_splits=1).splits == [[0, 3, 13]]
    assert read.ask(recovery, max_splits=1).splits == [[0, 13, 20]]
    assert read.ask(recovery).end_of_splits
    assert not state_of(read.heartbeat(0, acked=[[recovery, 3, 20]])).finished
    assert state_of(read.heartbeat(0, finished_tasks=[recovery])).finished


def test_with_no_live_worker_the_next_one_to_register_recovers(state):
    read = start(state, workers=("a:1",))
    a = read.tasks["a:1"]
    read.ask(a)
    read.lose("a:1")
    assert pushed(read.heartbeat(0, task_epoch=1)) == []  # nobody to run it
    assert read.iteration.pending == [0, 10]
    registered = register_worker(state, "c:1", now=2.0)
    [task] = registered.tasks
    assert read.ask(task["task_id"], max_splits=4).splits == [[0, 0, 10]]
    assert read.ask(task["task_id"]).splits == [[0, 10, 20]]


def test_a_finished_task_lost_before_its_acks_is_recovered_too(state):
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a)  # keys 0..10
    read.ask(a)  # 10..20
    heartbeat(state, "a:1", read.workers()["a:1"], [[a, True]], now=0.1)  # finished
    read.lose("a:1")
    assert read.iteration.orphans[a]["keys"] == [0, 20]
    read.heartbeat(0, acked=[[a, 0, 15]], task_epoch=1)
    assert read.ask(b, max_splits=4).splits == [[0, 15, 20]]


# ------------------------------------------------------------------ repetitions


def test_pending_keys_of_an_older_repetition_go_to_a_later_request(state):
    read = start(state, data=TWICE)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    assert read.ask(a).splits == [[0, 0, 10]]
    while not read.ask(b, max_splits=256).end_of_splits:
        pass
    assert read.ask(b, repetition=1).splits == [[1, 0, 10]]
    assert read.unacked("b:1") == [10, 640, key(1, 0), key(1, 10)]
    read.lose("a:1")
    read.heartbeat(0, acked=[[a, 0, 2]], task_epoch=1)
    assert read.iteration.pending == [2, 10]
    assert read.ask(b, repetition=1).splits == [[0, 2, 10]]
    assert read.ask(b, repetition=1).splits == [[1, 10, 20]]


# ------------------------------------------------------------------ resume


def resumed(state: DispatcherState, keys: list[int], **job: Any) -> Read:
    """A new, unnamed tracked read that resumes having consumed ``keys``."""
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, RANGE_640)
    job_id = create_job(state, dataset_id, DYNAMIC, **job)
    request = m.GetOrCreateIteration(job_id=job_id, repetition=0, resume=keys)
    joined = reply(state, request)
    assert isinstance(joined, m.IterationState), joined
    tasks = {t["worker_address"]: t["task_id"] for t in joined.tasks}
    return Read(state, joined.iteration_id, tasks, [joined.client_id], {})


def test_a_resumed_read_skips_the_keys_consumed_before(state):
    read = resumed(state, [0, 25, 40, 45])
    a = read.tasks["a:1"]
    expected = [[0, 25, 30], [0, 30, 40], [0, 45, 50]]
    assert read.ask(a, max_splits=3).splits == expected
    assert read.ask(a, again=True, max_splits=3).splits == expected
    assert read.unacked("a:1") == [25, 40, 45, 50]
    assert read.ask(a).splits == [[0, 50, 60]]
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert tables(replayed) == tables(state.records)


def test_a_read_resumed_at_its_end_has_nothing_left(state):
    read = resumed(state, [0, 640])
    a = read.tasks["a:1"]
    passed = read.ask(a, max_splits=4)  # every split passed over: ask again
    assert (passed.splits, passed.end_of_splits) == ([], False)
    assert read.ask(a).end_of_splits
    assert state_of(read.heartbeat(0, finished_tasks=[a])).finished


@pytest.mark.parametrize(
    ("job", "resume", "wanted"),
    [
        ({"job_name": "shared"}, [0, 5], "is named"),
        ({"exactly_once": False}, [0, 5], "does not track"),
        ({}, [5, 0], "resume: expected sorted"),
        ({}, [0, 5, 3, 8], "resume: expected sorted"),
        ({}, [0, 5, 7], "resume: expected sorted"),
        ({}, [0, True], "resume: expected sorted"),
        ({}, [-1, 3], "resume: expected sorted"),
    ],
)
def test_a_resume_that_cannot_be_honoured_is_refused(state, job, resume, wanted):
    dataset_id = register_dataset(state, RANGE_640)
    job_id = create_job(state, dataset_id, DYNAMIC, **job)
    request = m.GetOrCreateIteration(job_id=job_id, repetition=0, resume=resume)
    answer = error(state, request)
    assert answer.code == "INVALID_ARGUMENT"
    assert wanted in answer.message
    assert state.records.jobs[job_id].iterations == {}


def test_a_resume_into_a_running_iteration_is_refused(state):
    dataset_id = register_dataset(state, RANGE_640)
    job_id = create_job(state, dataset_id, DYNAMIC)
    join(state, job_id)
    request = m.GetOrCreateIteration(job_id=job_id, repetition=0, resume=[0, 5])
    assert "new iteration" in error(state, request).message


# ------------------------------------------------------------------ hostile acks


@pytest.mark.parametrize(
    "acked",
    [
        [[]],
        [7],
        [[1, 5]],
        [[1, 5, 5]],
        [[1, 6, 5]],
        [["1", 0, 5]],
        [[1, 0, 5.0]],
        [[1, False, 5]],
        [[1, 0, 5, 7]],
        [[1, -3, 5]],
        [[1, *range(MAX_ACKED_NUMBERS)]],
    ],
)
def test_malformed_acks_are_refused_and_change_nothing(state, acked):
    read = start(state)
    read.ask(read.tasks["a:1"])
    before = tables(state.records)
    for message in (
        m.ClientHeartbeat(client_id=read.clients[0], acked=acked),
        m.ReleaseIterationClient(client_id=read.clients[0], acked=acked),
    ):
        answer = error(state, message)
        assert answer.code == "INVALID_ARGUMENT"
        assert f"{message.TYPE}.acked" in answer.message
    assert tables(state.records) == before


# ------------------------------------------------------------------ restarts


def mid_fence(state: DispatcherState) -> Read:
    """Worker a lost with keys 5..20 unacknowledged; client 0 fenced, client 1 not;
    task b holds keys handed out again from a lost task c (all events used)."""
    read = start(state, clients=2, workers=("a:1", "b:1", "c:1"))
    a, b, c = (read.tasks[w] for w in ("a:1", "b:1", "c:1"))
    read.ask(a, max_splits=2)  # 0..20
    read.ask(c)  # 20..30
    read.heartbeat(0, acked=[[a, 0, 5]])
    read.lose("c:1", now=1.2)
    read.heartbeat(0, task_epoch=1, now=1.3)
    read.heartbeat(1, task_epoch=1, now=1.3)
    assert read.ask(b).splits == [[0, 20, 30]]
    read.lose("a:1", now=2.0)
    read.heartbeat(0, task_epoch=2, now=2.1)
    assert read.iteration.orphans[a] == {
        "keys": [5, 20],
        "waiting": [read.clients[1]],
        "epoch": 2,
    }
    return read


def test_the_new_events_replay_and_snapshot_to_the_same_state(state):
    read = mid_fence(state)
    assert {ev.RangesAcked, ev.RangesHanded, ev.ClientFenced} <= {
        type(e) for e in state.log
    }
    loaded = replayed_and_loaded(state.log, read.records)
    orphan = loaded.iterations[read.iteration_id].orphans[read.tasks["a:1"]]
    assert isinstance(orphan["keys"], Ranges)
    assert isinstance(loaded.tasks[read.tasks["b:1"]].unacked, Ranges)


def test_a_restart_mid_fence_keeps_the_orphans_and_the_fence(tmp_path: Path):
    config = DispatcherConfig(
        work_dir=str(tmp_path),
        fault_tolerant_mode=True,
        worker_timeout_ms=1_000,
        client_timeout_ms=10_000,
    )
    with Journal(str(tmp_path)) as journal:
        live = mid_fence(DispatcherState(config, JournalSink(journal)))
        b = live.tasks["b:1"]
        handed = live.ask(b, again=True)
    with reopened(tmp_path) as restarted:
        assert tables(restarted.records) == tables(live.records)
        read = Read(
            restarted, live.iteration_id, live.tasks, live.clients, live.requests
        )
        assert read.ask(b, again=True).splits == handed.splits == [[0, 20, 30]]
        read.heartbeat(0, task_epoch=2, now=100.0)  # fenced already: no change
        assert read.iteration.pending == []
        read.heartbeat(1, acked=[[live.tasks["a:1"], 15, 20]], task_epoch=2, now=100.0)
        assert read.iteration.pending == [5, 15]
        assert read.ask(b).splits == [[0, 5, 15]]


# ------------------------------------------------------------------ marks


def test_marks_of_owed_roots_are_kept_and_handed_out_with_their_keys(state):
    """The latest mark of a root goes with its keys to the task that takes them."""
    read = start(state)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a)  # keys 0..10
    first, later = [2, 3, 4, 1], [2, 3, 4, 5]  # root (3, 4): outputs 1, then 5
    done = [2, 1, 2, 9]  # root (1, 2), all acknowledged below
    stale = [2, 60, 61, 0]  # a key handed to nobody
    read.heartbeat(0, acked=[[a, 0, 3]], progress=[first, stale])
    read.heartbeat(0, acked=[[a, 1, 2]], progress=[done, later, first, [7]])
    assert read.iteration.progress == {3: later}  # the latest; nothing else
    events = len(state.log)
    read.heartbeat(0, progress=[first])  # says less: no event
    assert len(state.log) == events
    read.lose("a:1")
    read.heartbeat(0, task_epoch=1)
    handed = read.ask(b)
    assert (handed.splits, handed.progress) == ([[0, 3, 10]], [later])
    assert read.ask(b, again=True).progress == [later]  # a retry: the same
    read.heartbeat(0, acked=[[b, 3, 4]])  # the root's last output came
    assert read.iteration.progress == {}
    replayed_and_loaded(state.log, state.records)
