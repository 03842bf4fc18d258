"""Group commit: a group of requests is kept with one fsync before any reply.

The state handles every request of a group, the journal writes their events
with one write and one fsync, and only then are the replies returned (and
sent, by the server). A failed fsync answers every request of the group
``UNAVAILABLE`` and rolls the state back: nothing handed out is lost, nothing
is handed out twice.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.splits import (
    ask_split,
    fake_workers_of_an_iteration,
    next_split_request,
    recv,
)
from tests.dispatcher.test_replay import tables
from zmqdata import service
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import journal as journal_module
from zmqdata._dispatcher.journal import Journal, JournalSink
from zmqdata._dispatcher.splits import split_size
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

pytestmark = pytest.mark.timeout(60)

DYNAMIC = 1
ELEMENTS = 10_000
SIZE = split_size(ELEMENTS)


def dynamic_iteration(state: DispatcherState, workers: int) -> int:
    """A named DYNAMIC iteration with a task on each of ``workers`` workers."""
    for i in range(workers):
        address = f"h:{7000 + i}"
        register = m.RegisterWorker(
            worker_address=address, data_address=f"tcp://{address}"
        )
        state.handle(f"w{i}".encode(), register, 0.0)
    pipeline = graph.serialize(zd.Dataset.range(ELEMENTS)._node)
    [(_, dataset)] = state.handle(b"c", m.GetOrRegisterDataset(pipeline=pipeline), 0.1)
    request = m.GetOrCreateJob(
        dataset_id=dataset.dataset_id, processing_mode=DYNAMIC, job_name="j"
    )
    [(_, job)] = state.handle(b"c", request, 0.2)
    begin = m.GetOrCreateIteration(job_id=job.job_id, repetition=0)
    iteration_id: int = state.handle(b"c", begin, 0.3)[0][1].iteration_id
    return iteration_id


def split_requests(
    state: DispatcherState, iteration_id: int, workers: int
) -> list[Any]:
    """The next ``GetSplit`` of each task, as ``(peer, request)`` pairs."""
    return [
        (f"w{i}".encode(), next_split_request(state, iteration_id, index=i))
        for i in range(workers)
    ]


def journaled_splits(work_dir: Path) -> list[int]:
    """The split indexes the journal on disk holds, in order."""
    with Journal(str(work_dir)) as journal:
        return [e.index for e in journal.replay() if isinstance(e, ev.SplitProduced)]


@pytest.fixture
def journal(tmp_path: Path) -> Any:
    with Journal(str(tmp_path)) as journal:
        yield journal


def ft_state(journal: Journal) -> DispatcherState:
    config = DispatcherConfig(work_dir=str(journal.directory), fault_tolerant_mode=True)
    return DispatcherState(config, JournalSink(journal))


def test_a_group_is_written_with_one_fsync_before_its_replies(journal, monkeypatch):
    state = ft_state(journal)
    iteration_id = dynamic_iteration(state, workers=8)
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        fsyncs.append(os.fstat(fd).st_size)

    monkeypatch.setattr(journal_module.os, "fsync", fsync)
    commits = journal.commits
    replies = state.handle_group(split_requests(state, iteration_id, 8), 1.0)
    assert journal.commits == commits + 1
    assert fsyncs == [journal.path.stat().st_size]  # one fsync, of everything
    splits = sorted(reply.splits[0][1] // SIZE for [(_, reply)] in replies)
    assert splits == list(range(8))
    assert journaled_splits(journal.directory) == list(range(8))


def test_a_failed_fsync_fails_every_request_of_the_group_and_loses_nothing(
    journal, monkeypatch, caplog
):
    state = ft_state(journal)
    iteration_id = dynamic_iteration(state, workers=8)
    first = split_requests(state, iteration_id, 8)
    state.handle_group(first, 1.0)
    before, size = tables(state.records), journal.path.stat().st_size
    real_fsync = os.fsync
    failures = [OSError(errno.EIO, "I/O error")]

    def fsync(fd: int) -> None:
        if failures:
            raise failures.pop()
        real_fsync(fd)

    monkeypatch.setattr(journal_module.os, "fsync", fsync)
    group = [
        *split_requests(state, iteration_id, 8),
        (b"w9", m.RegisterWorker(worker_address="h:9", data_address="tcp://h:9")),
    ]
    failed = state.handle_group(group, 2.0)
    assert [len(replies) for replies in failed] == [1] * len(group)
    for (_, request), [(_, reply)] in zip(group, failed, strict=True):
        assert isinstance(reply, m.Error)
        assert reply.code == "UNAVAILABLE"
        assert reply.request_id == request.request_id
    assert "cannot be written" in failed[0][0][1].message
    assert "9 requests failed" in caplog.text
    assert tables(state.records) == before  # rolled back
    assert journal.path.stat().st_size == size  # the group's records are cut off
    # The same requests, sent again, get the splits they would have got.
    again = state.handle_group(group, 3.0)
    splits = sorted(reply.splits[0][1] // SIZE for [(_, reply)] in again[:8])
    assert splits == list(range(8, 16))
    assert isinstance(again[8][0][1], m.RegisterWorkerReply)
    assert journaled_splits(journal.directory) == list(range(16))
    live = tables(state.records)
    with Journal(str(journal.directory)) as reopened:
        config = state.config
        assert tables(DispatcherState(config, JournalSink(reopened)).records) == live


def test_a_failed_commit_keeps_liveness_and_the_tick_retries(journal, monkeypatch):
    state = ft_state(journal)
    state.handle(
        b"w", m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1"), 0.0
    )
    real_fsync = os.fsync
    failing = [True]

    def fsync(fd: int) -> None:
        if failing:
            raise OSError(errno.EIO, "I/O error")
        real_fsync(fd)

    monkeypatch.setattr(journal_module.os, "fsync", fsync)
    timeout = state.config.worker_timeout_ms / 1000
    assert state.tick(timeout + 1) == []  # the removal cannot be kept...
    assert list(state.records.workers) == [1]  # ...so it waits
    assert state.liveness.worker_seen(1) == 0.0  # not refreshed by the roll back
    failing.clear()
    state.tick(timeout + 1)
    assert state.records.workers == {}


class _Recorder:
    """The dispatcher loop's fsyncs (with the journal's size) and sends, in order."""

    def __init__(self, loop: Any) -> None:
        self.log: list[tuple[str, Any]] = []
        self._send = loop._send
        loop._send = self.send

    def fsync(self, real: Any) -> Any:
        def fsync(fd: int) -> None:
            real(fd)
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
                self.log.append(("fsync", os.fstat(fd).st_size))

        return fsync

    def send(self, outgoing: list[Any]) -> None:
        self.log.append(("send", [message for _, message in outgoing]))
        self._send(outgoing)


def test_the_server_sends_a_split_only_after_its_record_is_fsynced(
    tmp_path, monkeypatch
):
    config = service.DispatcherConfig(work_dir=str(tmp_path), fault_tolerant_mode=True)
    server = service.DispatchServer(config, start=False)
    recorder = _Recorder(server._loop)
    monkeypatch.setattr(journal_module.os, "fsync", recorder.fsync(os.fsync))
    with server:
        server.start()
        dataset_id = service.register_dataset(
            server.target, zd.Dataset.range(ELEMENTS), compression=None
        )
        sockets, state = fake_workers_of_an_iteration(server.target, dataset_id, 16)
        task_ids = [task["task_id"] for task in state.tasks]
        got: list[int] = []
        for request_id in range(1, 5):  # 4 rounds of 16 concurrent requests
            for sock, task_id in zip(sockets, task_ids, strict=True):
                ask_split(sock, state.iteration_id, task_id, request_id)
            for sock in sockets:
                got.append(recv(sock, m.GetSplitReply).splits[0][1] // SIZE)
    for sock in sockets:
        sock.close()
    assert sorted(got) == list(range(64))
    ends = _split_record_ends(tmp_path)
    durable, checked = 0, 0
    for kind, what in recorder.log:
        if kind == "fsync":
            durable = max(durable, what)
            continue
        for message in what:
            if isinstance(message, m.GetSplitReply) and message.splits:
                assert ends[message.splits[0][1] // SIZE] <= durable, (
                    "sent before fsync"
                )
                checked += 1
    assert checked == 64


def _split_record_ends(work_dir: Path) -> dict[int, int]:
    """Split index -> the offset where its journal record ends."""
    scan = journal_module._scan(work_dir / "journal-0.log")
    ends = {}
    for offset, payload in scan.records:
        event = journal_module.decode_event(payload)
        if isinstance(event, ev.SplitProduced):
            ends[event.index] = offset + journal_module._HEADER.size + len(payload)
    return ends
