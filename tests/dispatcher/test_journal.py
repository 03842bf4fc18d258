"""The write-ahead journal: durable appends, replay, torn and corrupt records."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgpack
import pytest

import zmqdata as zd
from tests.dispatcher.splits import next_split_request
from tests.dispatcher.test_replay import tables
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import journal as journal_module
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.journal import (
    MAGIC,
    Journal,
    JournalSink,
    decode_event,
    encode_event,
)
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError, UnavailableError

EVENTS: list[ev.Event] = [
    ev.WorkerRegistered(1, b"peer", "h:1", "tcp://h:1", ("a", "b"), "p", "", 0.5, None),
    ev.DatasetRegistered("2", b"\x00pipeline", "fp", "AUTO", b""),
    ev.ScheduleChanged(3, 0, (4, 5)),
    ev.TaskFinished(4),
]


def test_events_round_trip_through_the_file(tmp_path):
    with Journal(str(tmp_path)) as journal:
        for event in EVENTS:
            journal.append(event)
    with Journal(str(tmp_path)) as journal:
        assert list(journal.replay()) == EVENTS


def test_a_client_acquired_before_owners_were_journaled_has_none():
    acquired = ev.ClientAcquired(7, 3, 0.5, b"key", owner="alice-public-key")
    body = msgpack.unpackb(encode_event(acquired)[journal_module._HEADER.size :])
    del body["owner"]  # what a journal of an older version holds
    assert decode_event(msgpack.packb(body)) == dataclasses.replace(acquired, owner="")
    records = ClusterRecords()
    records.apply(ev.JobCreated(1, "d", None, 1, None, "ANY"))
    records.apply(ev.IterationCreated(3, 1, 0))
    records.apply(acquired)
    copy = ClusterRecords()
    snapshot.load(copy, snapshot.dump(records))
    assert copy.clients[7].owner == "alice-public-key"


def test_a_torn_last_record_is_cut_off(tmp_path):
    with Journal(str(tmp_path)) as journal:
        for event in EVENTS:
            journal.append(event)
    path = journal.path
    path.write_bytes(path.read_bytes() + encode_event(ev.TaskFinished(9))[:-3])
    with Journal(str(tmp_path)) as journal:
        assert list(journal.replay()) == EVENTS
        journal.append(ev.TaskFinished(10))
    with Journal(str(tmp_path)) as journal:
        assert list(journal.replay()) == [*EVENTS, ev.TaskFinished(10)]


def test_a_corrupt_record_refuses_to_replay(tmp_path):
    record = encode_event(ev.TaskFinished(1))
    damaged = MAGIC + record[:4] + b"\xc1" * (len(record) - 4)
    (tmp_path / "journal-0.log").write_bytes(damaged)
    with pytest.raises(FailedPreconditionError), Journal(str(tmp_path)) as journal:
        list(journal.replay())


def dynamic_job_with_splits(
    journal: Journal, splits: int
) -> tuple[DispatcherState, m.GetSplit]:
    """A fault-tolerant state: a worker, a named DYNAMIC job, ``splits`` handed out.

    Returns the state and the request for the job's next split.
    """
    config = DispatcherConfig(work_dir=str(journal.directory), fault_tolerant_mode=True)
    live = DispatcherState(config, JournalSink(journal))
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    live.handle(b"w", register, 0.0)
    pipeline = graph.serialize(zd.Dataset.range(1_000)._node)
    [(_, dataset)] = live.handle(b"c", m.GetOrRegisterDataset(pipeline=pipeline), 0.1)
    job_request = m.GetOrCreateJob(
        dataset_id=dataset.dataset_id, processing_mode=1, job_name="j"
    )
    [(_, job)] = live.handle(b"c", job_request, 0.2)
    out = live.handle(
        b"c", m.GetOrCreateIteration(job_id=job.job_id, repetition=0), 0.3
    )
    for _ in range(splits):
        live.handle(b"w", next_split_request(live, out[0][1].iteration_id), 0.4)
    return live, next_split_request(live, out[0][1].iteration_id)


@contextmanager
def reopened(work_dir: Path) -> Iterator[DispatcherState]:
    """The state a restarted dispatcher rebuilds from ``work_dir``."""
    config = DispatcherConfig(work_dir=str(work_dir), fault_tolerant_mode=True)
    with Journal(str(work_dir)) as journal:
        yield DispatcherState(config, JournalSink(journal), now=100.0)


def test_a_state_replayed_from_its_journal_equals_the_live_one(tmp_path):
    with Journal(str(tmp_path)) as journal:
        live, split = dynamic_job_with_splits(journal, 3)
    with reopened(tmp_path) as replayed:
        assert tables(replayed.records) == tables(live.records)
        assert replayed.liveness.worker_seen(1) == 100.0  # just seen after a replay
        [(_, reply)] = replayed.handle(b"w", split, 100.0)
    assert reply.splits == [[0, 3 * 15, 4 * 15]]  # the 4th split: none handed out twice


def test_compaction_snapshots_the_state_and_starts_a_short_journal(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(journal_module, "COMPACT_MIN_EVENTS", 8)
    with Journal(str(tmp_path)) as journal:
        live, split = dynamic_job_with_splits(journal, 40)
        assert journal.generation >= 2
        assert journal.events < 40  # not every split since the start
    files = sorted(p.name for p in tmp_path.iterdir() if p.name != "incarnation")
    generation = journal.generation
    assert files == [f"journal-{generation}.log", f"snapshot-{generation}.msgpack"]
    with reopened(tmp_path) as replayed:
        assert tables(replayed.records) == tables(live.records)
        [(_, reply)] = replayed.handle(b"w", split, 100.0)
    # The 41st split: none handed out twice.
    assert reply.splits == [[0, 40 * 15, 41 * 15]]


def test_a_failed_compaction_keeps_the_generation_and_is_retried(
    tmp_path, monkeypatch, caplog
):
    """The sink owns the policy: it compacts when due, and again after a failure."""
    monkeypatch.setattr(journal_module, "COMPACT_MIN_EVENTS", 2)
    with Journal(str(tmp_path)) as journal:
        sink = JournalSink(journal)
        records = sink.restore(now=0.0)
        compact, attempts = journal.compact, []

        def full_disk_once(data: bytes) -> None:
            attempts.append(data)
            if len(attempts) == 1:
                raise UnavailableError("no space left")
            compact(data)

        monkeypatch.setattr(journal, "compact", full_disk_once)
        for worker_id in (1, 2, 3):
            address = f"h:{worker_id}"
            event = ev.WorkerRegistered(
                worker_id, b"p", address, f"tcp://{address}", (), "", "", 0.0, None
            )
            sink.append(event)
            records.apply(event)
            sink.applied(records)
            assert journal.generation == (0 if worker_id < 3 else 1)
        assert len(attempts) == 2
        assert "journal compaction failed, retried later" in caplog.text
    with Journal(str(tmp_path)) as journal:
        restored = JournalSink(journal).restore(now=5.0)
    assert sorted(restored.workers) == [1, 2, 3]


def test_a_crash_between_snapshot_and_new_journal_applies_nothing_twice(tmp_path):
    with Journal(str(tmp_path)) as journal:
        live, split = dynamic_job_with_splits(journal, 5)
    # The crash: the next generation's snapshot is in place, the old journal too.
    (tmp_path / "snapshot-1.msgpack").write_bytes(snapshot.dump(live.records))
    (tmp_path / "snapshot-2.msgpack.tmp").write_bytes(b"half a snapsh")
    with reopened(tmp_path) as replayed:
        assert tables(replayed.records) == tables(live.records)
        [(_, reply)] = replayed.handle(b"w", split, 100.0)
    assert reply.splits == [[0, 5 * 15, 6 * 15]]
    assert not (tmp_path / "journal-0.log").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_retried_requests_are_answered_as_before_also_after_a_restart(tmp_path):
    """A kill -9 between the journal's fsync and the reply: the retry (same
    request) finds the job, the consumer and the split the first attempt made."""
    with Journal(str(tmp_path)) as journal:
        live, _ = dynamic_job_with_splits(journal, 0)
        dataset_id = next(iter(live.records.datasets))
        job_request = m.GetOrCreateJob(dataset_id=dataset_id, processing_mode=1)
        [(_, job)] = live.handle(b"c", job_request, 0.5)
        join = m.GetOrCreateIteration(job_id=job.job_id, repetition=0)
        joined = live.handle(b"c", join, 0.6)[0][1]
        split = next_split_request(live, joined.iteration_id)
        [(_, first)] = live.handle(b"w", split, 0.7)
    with reopened(tmp_path) as replayed:
        [(_, again)] = replayed.handle(b"c", job_request, 100.0)
        assert again.job_id == job.job_id
        rejoined = replayed.handle(b"c", join, 100.0)[0][1]
        assert rejoined.client_id == joined.client_id
        assert len(replayed.records.clients) == len(live.records.clients)
        [(_, same)] = replayed.handle(b"w", split, 100.0)
        assert same.splits == first.splits
        [(_, following)] = replayed.handle(
            b"w", next_split_request(replayed, joined.iteration_id), 100.0
        )
        assert following.splits[0][1] == first.splits[0][2]
