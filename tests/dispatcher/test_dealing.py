"""Multi-rank reads on the dispatcher: ``DispatcherState`` with a fake clock.

A finite ``distributed_epoch`` job with ``num_consumers`` is *dealt*: its
splits go out by ordinal in the order ``split_order(seed, epoch)``, as
``[repetition, lo, hi, ordinal, skip]``; workers tell split counts with their
next ``GetSplit``; consumers' heartbeats carry ``[consumer, ordinal, index]``,
which releases splits every consumer is past and, past the last split, ends
the consumer. ``range(640)`` is cut into 64 splits of 10.
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
    error,
    heartbeat,
    pipeline,
    register_dataset,
    register_worker,
    reply,
    send,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dataset.ops import split_runs
from zmqdata._dispatcher import dealing
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.journal import Journal, JournalSink
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import deal
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Ranges

pytestmark = pytest.mark.timeout(30)

RANGE_640 = pipeline(zd.Dataset.range(640))
SPLITS = 64
CONFIG = DispatcherConfig(worker_timeout_ms=1_000, client_timeout_ms=10_000)


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(CONFIG)


def source_range(q: int, seed: int | None, epoch: int = 0) -> list[int]:
    """``[lo, hi]`` of ordinal ``q``'s source split (range(640): 10 each)."""
    s = int(deal.split_order(seed, epoch, SPLITS)[q])
    return [10 * s, 10 * s + 10]


@dataclass
class Dealt:
    """A dealt job read by ``R`` consumers, on workers ``a:1`` and ``b:1``."""

    state: DispatcherState
    job_id: int
    iteration_id: int
    tasks: dict[str, int]
    clients: list[int]
    requests: dict[int, int]

    def ask(
        self, task_id: int, max_splits: int = 1, again: bool = False, counts=()
    ) -> m.GetSplitReply:
        """Task ``task_id``'s next split request (``again``: its last one, resent)."""
        request_id = self.requests.get(task_id, 0) + (0 if again else 1)
        self.requests[task_id] = request_id
        message = m.GetSplit(
            request_id=request_id,
            iteration_id=self.iteration_id,
            repetition=0,
            task_id=task_id,
            max_splits=max_splits,
            counts=list(counts),
        )
        answer = reply(self.state, message, peer=b"w")
        assert isinstance(answer, m.GetSplitReply), answer
        return answer

    def at(self, consumer: int, ordinal: int, index: int, now: float = 0.5) -> Any:
        """Consumer ``consumer``'s heartbeat: first element not received."""
        message = m.ClientHeartbeat(
            client_id=self.clients[consumer], deal=[consumer, ordinal, index]
        )
        return send(self.state, message, now=now)

    def lose(self, address: str, now: float = 1.5) -> list[tuple[bytes, m.Message]]:
        """Worker ``address`` times out (the others heartbeat); what the tick sends."""
        for other, worker_id in self.workers().items():
            if other != address:
                heartbeat(self.state, other, worker_id, [], now=now - 0.6)
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


def start(
    state: DispatcherState,
    R: int = 2,
    seed: int | None = 5,
    data: bytes = RANGE_640,
    workers: tuple[str, ...] = ("a:1", "b:1"),
    resume: list[int] | None = None,
    name: str = "dealt",
) -> Dealt:
    for address in workers:
        register_worker(state, address)
    dataset_id = register_dataset(state, data)
    job = m.GetOrCreateJob(
        dataset_id=dataset_id,
        processing_mode=DYNAMIC,
        job_name=name,
        num_consumers=R,
        seed=seed,
    )
    job_id = reply(state, job).job_id
    joined = [
        reply(
            state,
            m.GetOrCreateIteration(job_id=job_id, repetition=0, resume_deal=resume),
        )
        for _ in range(R)
    ]
    for answer in joined:
        assert isinstance(answer, m.IterationState), answer
    tasks = {t["worker_address"]: t["task_id"] for t in joined[0].tasks}
    return Dealt(
        state, job_id, joined[0].iteration_id, tasks, [j.client_id for j in joined], {}
    )


def pushed(out: list[tuple[bytes, m.Message]]) -> list[tuple[bytes, dict[str, Any]]]:
    return [
        (p, t) for p, msg in out if isinstance(msg, m.ProcessTask) for t in msg.tasks
    ]


def state_of(out: list[tuple[bytes, m.Message]]) -> m.IterationState:
    [answer] = [msg for _, msg in out if isinstance(msg, m.IterationState)]
    return answer


# ------------------------------------------------------------------ jobs


def test_a_finite_job_with_num_consumers_is_dealt_and_workers_are_told(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, RANGE_640)
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=DYNAMIC, job_name="j", num_consumers=3
    )
    job_id = reply(state, job).job_id
    assert state.records.jobs[job_id].dealt
    out = send(state, m.GetOrCreateIteration(job_id=job_id, repetition=0))
    [(peer, task)] = pushed(out)
    assert (peer, task["dealt"]) == (b"a:1", True)
    info = state_of(out).deal
    assert (info["epoch"], info["splits"], info["start"], info["stream"]) == (
        0,
        SPLITS,
        0,
        [0],
    )
    assert state_of(out).rounds == []  # no coordinated schedule


def test_an_endless_job_with_num_consumers_keeps_coordinated_rounds(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, pipeline(zd.Dataset.range(640).repeat()))
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=DYNAMIC, job_name="j", num_consumers=2
    )
    job_id = reply(state, job).job_id
    assert not state.records.jobs[job_id].dealt
    out = send(state, m.GetOrCreateIteration(job_id=job_id, repetition=0))
    answer = state_of(out)
    assert answer.deal == {}
    assert answer.rounds


def test_parallel_epochs_with_num_consumers_is_not_dealt(state):
    dataset_id = register_dataset(state, pipeline(zd.Dataset.range(10).repeat()))
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=OFF, job_name="j", num_consumers=2
    )
    assert not state.records.jobs[reply(state, job).job_id].dealt


@pytest.mark.parametrize(
    ("dataset", "op"),
    [
        (zd.Dataset.range(100).shuffle(10), "shuffle"),
        (zd.Dataset.range(100).map(lambda x: x).take(50), "take"),
        (zd.Dataset.range(100).repeat(2), "repeat"),
        (zd.Dataset.range(100).skip(3), "skip"),
        (zd.Dataset.range(100).shard(2, 0), "shard"),
        (zd.Dataset.range(100).enumerate(), "enumerate"),
        (
            zd.Dataset.range(100).map(
                lambda x: x, num_parallel_calls=2, deterministic=False
            ),
            "map",
        ),
    ],
)
def test_a_pipeline_that_cannot_be_dealt_is_refused_naming_the_op(state, dataset, op):
    dataset_id = register_dataset(state, pipeline(dataset))
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=DYNAMIC, job_name="j", num_consumers=2
    )
    refused = error(state, job)
    assert refused.code == "INVALID_ARGUMENT"
    assert f"{op}(" in refused.message or f"{op} before" in refused.message
    assert "num_consumers" in refused.message


@pytest.mark.parametrize(
    "dataset",
    [
        zd.Dataset.range(100).shuffle(10, seed=3),
        zd.Dataset.range(100).map(lambda x: x, num_parallel_calls=2),
        zd.Dataset.range(100).map(
            lambda x: x, num_parallel_calls=1, deterministic=False
        ),
        zd.Dataset.range(100).filter(lambda x: x % 2 == 0).batch(4),
    ],
)
def test_deterministic_pipelines_are_dealt(state, dataset):
    dataset_id = register_dataset(state, pipeline(dataset))
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=DYNAMIC, job_name="j", num_consumers=2
    )
    assert state.records.jobs[reply(state, job).job_id].dealt


def test_the_same_ops_are_fine_without_num_consumers(state):
    dataset_id = register_dataset(state, pipeline(zd.Dataset.range(100).shuffle(10)))
    job = m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC)
    assert not state.records.jobs[reply(state, job).job_id].dealt


@pytest.mark.parametrize(("mode", "seed"), [(OFF, 3), (DYNAMIC, -1)])
def test_a_seed_needs_distributed_epoch_and_a_non_negative_int(state, mode, seed):
    dataset_id = register_dataset(state, pipeline(zd.Dataset.range(10)))
    refused = error(
        state, m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=mode, seed=seed)
    )
    assert refused.code == "INVALID_ARGUMENT"
    assert "seed" in refused.message


def test_consumers_of_a_named_job_must_agree_on_the_seed(state):
    start(state, seed=5)
    dataset_id = register_dataset(state, RANGE_640)
    job = m.GetOrCreateJob(
        dataset_id=dataset_id,
        processing_mode=DYNAMIC,
        job_name="dealt",
        num_consumers=2,
        seed=6,
    )
    assert "seed" in error(state, job).message


def test_splits_are_cut_to_whole_batches():
    ds = zd.Dataset.range(1_000).map(lambda x: x).batch(32)
    assert split_runs.whole_batch(ds._node) == 32
    assert (
        split_runs.whole_batch(zd.Dataset.range(9).filter(bool).batch(4)._node) is None
    )
    assert split_runs.whole_batch(zd.Dataset.range(9)._node) is None
    records = ClusterRecords()
    records.apply(ev.DatasetRegistered("1", pipeline(ds), "f", None, b""))
    splits = dealing.splits_of(records.datasets["1"])
    assert splits.size % 32 == 0
    assert splits.size >= 15
    lo, hi = splits.at(0)[:2]
    assert hi - lo == splits.size


# ------------------------------------------------------------------ splits


def test_ordinals_go_out_in_the_seeded_order_as_five_fields(state):
    read = start(state, seed=5)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    first = read.ask(a, max_splits=2)
    assert first.splits == [
        [0, *source_range(0, 5), 0, 0],
        [0, *source_range(1, 5), 1, 0],
    ]
    assert read.ask(b).splits == [[0, *source_range(2, 5), 2, 0]]
    assert read.iteration.owners == {0: a, 1: a, 2: b}
    handed = [tuple(s[1:3]) for s in first.splits]
    while not (answer := read.ask(b, max_splits=7)).end_of_splits:
        handed += [tuple(s[1:3]) for s in answer.splits]
        assert [s[3] for s in answer.splits] == sorted(s[3] for s in answer.splits)
    handed.insert(2, tuple(source_range(2, 5)))
    assert sorted(handed) == [(10 * i, 10 * i + 10) for i in range(SPLITS)]
    assert [list(h) for h in handed] != [source_range(q, None) for q in range(SPLITS)]


def test_without_a_seed_ordinals_are_source_splits(state):
    read = start(state, seed=None)
    a = read.tasks["a:1"]
    answer = read.ask(a, max_splits=3)
    assert answer.splits == [[0, 10 * q, 10 * q + 10, q, 0] for q in range(3)]


def test_a_retried_split_request_gets_the_same_splits(state):
    read = start(state)
    a = read.tasks["a:1"]
    first = read.ask(a, max_splits=3)
    events = len(state.log)
    assert read.ask(a, max_splits=3, again=True).splits == first.splits
    assert len(state.log) == events  # nothing new handed out
    assert read.ask(a).splits[0][3] == 3


def test_split_counts_come_with_the_next_request(state):
    read = start(state)
    a = read.tasks["a:1"]
    read.ask(a, max_splits=2)
    read.ask(a, counts=[0, 7, 1, 0])
    assert read.iteration.split_counts == {0: 7, 1: 0}
    counted = [e for e in state.log if isinstance(e, ev.SplitsCounted)]
    assert counted == [ev.SplitsCounted(read.iteration_id, (0, 7, 1, 0))]
    read.ask(a, counts=[0, 7, 2, 3])  # told again: only the new one is an event
    assert read.iteration.split_counts == {0: 7, 1: 0, 2: 3}
    assert state.log[-2] == ev.SplitsCounted(read.iteration_id, (2, 3))


def test_malformed_counts_are_refused(state):
    read = start(state)
    message = m.GetSplit(
        request_id=1,
        iteration_id=read.iteration_id,
        repetition=0,
        task_id=read.tasks["a:1"],
        counts=[0, -1],
    )
    assert error(state, message, peer=b"w").code == "INVALID_ARGUMENT"


def test_positions_release_the_splits_every_consumer_is_past(state):
    read = start(state, R=2)
    a = read.tasks["a:1"]
    read.ask(a, max_splits=4)
    read.at(0, 3, 5)
    assert read.iteration.released == 0  # consumer 1 not heard from
    read.at(1, 2, 0)
    assert read.iteration.released == 2
    assert read.iteration.owners == {2: a, 3: a}
    assert read.ask(a).released == 2  # workers drop what they hold of them
    read.at(1, 1, 0)  # a stale position never takes a release back
    assert read.iteration.released == 2
    assert [e.below for e in state.log if isinstance(e, ev.SplitsReleased)] == [2]


@pytest.mark.parametrize(
    "position", [[0, 1], [0, 1, 2, 3], [-1, 0, 0], [0, "x", 0], [0, 1, True]]
)
def test_malformed_positions_are_refused(state, position):
    read = start(state)
    message = m.ClientHeartbeat(client_id=read.clients[0], deal=position)
    assert error(state, message).code == "INVALID_ARGUMENT"


def test_a_position_of_a_consumer_out_of_range_is_ignored(state):
    read = start(state, R=2)
    read.ask(read.tasks["a:1"], max_splits=2)
    read.at(0, 1, 0)
    message = m.ClientHeartbeat(client_id=read.clients[1], deal=[5, 1, 0])
    state_of(send(state, message, now=0.5))  # consumer 5 of 2: no effect
    assert read.iteration.released == 0
    assert read.iteration.done_consumers == []


# ------------------------------------------------------------------ lost workers


def test_a_lost_workers_unreleased_splits_go_again_first_with_the_common_skip(state):
    read = start(state, R=2)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=3)  # ordinals 0, 1, 2
    read.ask(b)  # ordinal 3
    read.at(0, 1, 6)
    read.at(1, 1, 4)  # both past ordinal 0; in ordinal 1 at 6 and 4
    assert read.iteration.released == 1
    read.lose("a:1")
    assert read.iteration.lost_splits == [1, 2]
    assert read.iteration.owners == {3: b}
    again = read.ask(b)
    assert again.splits == [[0, *source_range(1, 5), 1, 4]]  # skip: both have 4
    assert again.released == 1
    assert read.ask(b, again=True).splits == again.splits  # retried: the same
    assert read.ask(b).splits == [[0, *source_range(2, 5), 2, 0]]  # nobody is there
    assert read.ask(b).splits[0][3] == 4  # then fresh ordinals
    handed = [e for e in state.log if isinstance(e, ev.SplitHandedAgain)]
    assert [(e.ordinal, e.skip, e.task_id) for e in handed] == [(1, 4, b), (2, 0, b)]
    assert read.iteration.owners == {1: b, 2: b, 3: b, 4: b}


def test_the_skip_counts_only_consumers_in_that_split(state):
    assert dealing.skip_for({0: [3, 5], 1: [4, 0]}, 2, 3) == 5
    assert dealing.skip_for({0: [3, 5], 1: [3, 2]}, 2, 3) == 2
    assert dealing.skip_for({0: [3, 5]}, 2, 3) == 0  # consumer 1 unheard of
    assert dealing.skip_for({0: [2, 9], 1: [3, 5]}, 2, 3) == 0  # 0 is before it
    assert dealing.skip_for({0: [4, 0], 1: [5, 0]}, 2, 3) == 0  # all past it


def test_released_splits_of_a_lost_worker_are_not_handed_again(state):
    read = start(state, R=1)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=2)
    read.at(0, 2, 0)
    read.lose("a:1")
    assert read.iteration.lost_splits == []
    assert read.ask(b).splits[0][3] == 2


def test_a_new_task_takes_lost_splits_when_every_other_task_finished(state):
    read = start(state, R=1)
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a)  # ordinal 0
    while not read.ask(b, max_splits=64).end_of_splits:
        pass
    heartbeat(state, "b:1", read.workers()["b:1"], [[b, True]], now=0.5)
    assert read.records.tasks[b].finished
    out = read.lose("a:1")
    [(peer, task)] = pushed(out)
    assert peer == b"b:1"
    assert task["dealt"]
    c = task["task_id"]
    assert c not in (a, b)
    assert read.ask(c).splits == [[0, *source_range(0, 5), 0, 0]]
    assert read.ask(c).end_of_splits
    assert not read.iteration.finished  # until the consumer is done


def test_a_worker_registering_later_gets_a_task_of_the_running_iteration(state):
    read = start(state, R=2, workers=("a:1",))
    read.ask(read.tasks["a:1"], max_splits=2)
    register_worker(state, "c:1")
    [c] = [t for t in read.iteration.tasks.values() if t.worker_id != 1]
    assert read.ask(c.task_id).splits[0][3] == 2


# ------------------------------------------------------------------ the end


def test_the_iteration_finishes_when_every_consumer_is_done(state):
    read = start(state, R=3)
    a = read.tasks["a:1"]
    while not read.ask(a, max_splits=64).end_of_splits:
        pass
    heartbeat(state, "a:1", read.workers()["a:1"], [[a, True]], now=0.5)
    read.at(0, SPLITS, 0)
    read.at(1, SPLITS, 0)
    assert read.iteration.done_consumers == [0, 1]
    assert not read.iteration.finished
    assert not state_of(read.at(1, SPLITS, 0)).finished
    assert read.iteration.done_consumers == [0, 1]  # once each
    answer = state_of(read.at(2, SPLITS, 0))
    assert answer.finished
    assert read.iteration.finished
    done = [e.consumer_index for e in state.log if isinstance(e, ev.DealConsumerDone)]
    assert done == [0, 1, 2]


def test_a_release_carries_the_last_position(state):
    read = start(state, R=1)
    reply(
        state, m.ReleaseIterationClient(client_id=read.clients[0], deal=[0, SPLITS, 0])
    )
    assert read.iteration.done_consumers == [0]
    assert read.iteration.finished


def test_the_status_shows_the_dealt_job(state):
    read = start(state, R=2, seed=9)
    a = read.tasks["a:1"]
    read.ask(a, max_splits=SPLITS)
    counts = [v for q in range(SPLITS) for v in (q, 10)]
    counts[1] = 9  # one element filtered out: 639 elements, 1 undelivered
    read.ask(a, counts=counts)
    [job] = [j for j in state.status(0.5)["jobs"] if j["job_id"] == read.job_id]
    assert (job["num_consumers"], job["processing_mode"]) == (2, "distributed_epoch")
    dealt = job["dealt"]
    assert (dealt["seed"], dealt["epoch"], dealt["splits"]) == (9, 0, SPLITS)
    assert (dealt["elements"], dealt["undelivered"]) == (639, 1)


# ------------------------------------------------------------------ resumed reads


def test_a_restored_read_starts_at_its_anchor_with_its_stream(state):
    resume = deal.Resume(0, 3, deal.Stream(25, Ranges([25, 27, 30, 31])))
    read = start(state, R=2, resume=resume.to_wire())
    [resumed] = [e for e in state.log if isinstance(e, ev.DealResumed)]
    assert resumed == ev.DealResumed(read.iteration_id, 0, 3, (25, 25, 27, 30, 31))
    info = state_of(read.at(0, 3, 0)).deal
    assert (info["start"], info["stream"]) == (3, [25, 25, 27, 30, 31])
    a = read.tasks["a:1"]
    assert read.ask(a, max_splits=2).splits == [
        [0, *source_range(3, 5), 3, 2],  # its first 2 elements were consumed
        [0, *source_range(4, 5), 4, 0],
    ]
    assert read.iteration.released == 3


def test_a_restored_read_continues_the_saved_epoch(state):
    resume = deal.Resume(4, 0, deal.Stream(0))
    read = start(state, R=1, resume=resume.to_wire())
    assert read.iteration.deal_epoch == 4
    assert read.ask(read.tasks["a:1"]).splits[0][1:3] == source_range(0, 5, epoch=4)
    assert read.records.jobs[read.job_id].epoch_base == 4


def test_every_consumer_must_restore_the_same_position(state):
    resume = deal.Resume(0, 3, deal.Stream(25, Ranges([25, 27])))
    read = start(state, R=2, resume=resume.to_wire())
    other = deal.Resume(0, 3, deal.Stream(25, Ranges([25, 28])))
    message = m.GetOrCreateIteration(
        job_id=read.job_id, repetition=0, resume_deal=other.to_wire()
    )
    refused = error(state, message)
    assert refused.code == "FAILED_PRECONDITION"
    assert "same" in refused.message
    assert "merged position" in refused.message
    same = m.GetOrCreateIteration(
        job_id=read.job_id, repetition=0, resume_deal=resume.to_wire()
    )
    assert isinstance(reply(state, same), m.IterationState)


def test_a_read_started_fresh_refuses_a_restored_consumer(state):
    read = start(state, R=2)
    resume = deal.Resume(0, 3, deal.Stream(25))
    message = m.GetOrCreateIteration(
        job_id=read.job_id, repetition=0, resume_deal=resume.to_wire()
    )
    assert error(state, message).code == "FAILED_PRECONDITION"


def test_a_resume_into_a_job_that_is_not_dealt_is_refused(state):
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, RANGE_640)
    job = m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=DYNAMIC)
    job_id = reply(state, job).job_id
    message = m.GetOrCreateIteration(
        job_id=job_id,
        repetition=0,
        resume_deal=deal.Resume(0, 0, deal.Stream()).to_wire(),
    )
    assert error(state, message).code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("resume", [[0, 0], [0, 0, 5, 9], [0, -1, 0], [0, 0, 0, 9, 3]])
def test_a_malformed_resume_is_refused(state, resume):
    read = start(state, R=1, name="x")
    message = m.GetOrCreateIteration(
        job_id=read.job_id, repetition=1, resume_deal=resume
    )
    assert error(state, message).code == "INVALID_ARGUMENT"


# ------------------------------------------------------------------ replay


def busy(state: DispatcherState) -> Dealt:
    """A dealt read with every kind of event: counted, released, lost, handed again."""
    resume = deal.Resume(0, 1, deal.Stream(10, Ranges([10, 12])))
    read = start(state, R=2, resume=resume.to_wire())
    a, b = read.tasks["a:1"], read.tasks["b:1"]
    read.ask(a, max_splits=3)  # 1, 2, 3
    read.ask(b, max_splits=2)  # 4, 5
    read.ask(a, counts=[1, 10, 2, 10])  # 6
    read.at(0, 3, 2)
    read.at(1, 2, 8)
    read.lose("a:1")
    read.ask(b, counts=[4, 9])  # 2 again, skip 0
    read.at(0, SPLITS, 0, now=1.6)
    return read


def test_dealt_events_replay_and_snapshot_to_the_same_state(state):
    read = busy(state)
    kinds = {type(e) for e in state.log}
    assert {
        ev.DealResumed,
        ev.SplitsCounted,
        ev.SplitsReleased,
        ev.SplitHandedAgain,
        ev.DealConsumerDone,
    } <= kinds
    loaded = replayed_and_loaded(state.log, read.records)
    iteration = loaded.iterations[read.iteration_id]
    assert iteration.owners == read.iteration.owners
    assert all(isinstance(q, int) for q in iteration.owners)
    assert all(isinstance(q, int) for q in iteration.split_counts)


def test_a_restarted_dispatcher_answers_retries_and_continues(tmp_path: Path):
    config = DispatcherConfig(
        work_dir=str(tmp_path),
        fault_tolerant_mode=True,
        worker_timeout_ms=1_000,
        client_timeout_ms=10_000,
    )
    with Journal(str(tmp_path)) as journal:
        live = busy(DispatcherState(config, JournalSink(journal)))
        b = live.tasks["b:1"]
        last = live.ask(b, again=True)
    with reopened(tmp_path) as restarted:
        assert tables(restarted.records) == tables(live.records)
        read = Dealt(
            restarted,
            live.job_id,
            live.iteration_id,
            live.tasks,
            live.clients,
            live.requests,
        )
        assert read.ask(b, again=True).splits == last.splits
        assert read.iteration.lost_splits == [3, 6]
        # Positions are liveness, not journaled: none known, nothing skipped.
        assert read.ask(b).splits == [[0, *source_range(3, 5), 3, 0]]
