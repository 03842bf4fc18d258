"""``distributed_save`` on ``DispatcherState``: no sockets, real files under tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.test_replay import RecordingState
from tests.dispatcher.test_state import pipeline, register_worker, reply, send
from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import snapshot as records_snapshot
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(DispatcherConfig())


def start(state: RecordingState, ds: zd.Dataset, path: Path) -> str:
    registered = reply(
        state, m.GetOrRegisterDataset(request_id=3, pipeline=pipeline(ds))
    )
    started = reply(
        state,
        m.StartSave(request_id=4, dataset_id=registered.dataset_id, path=str(path)),
    )
    assert isinstance(started, m.StartSaveReply), started
    return started.save_id


def ask(
    state: RecordingState,
    worker: str,
    worker_id: int,
    save_id: str,
    chunks: list[list[Any]] = (),
    failed: str = "",
) -> Any:
    request = m.GetSaveSplit(
        request_id=9,
        worker_id=worker_id,
        save_id=save_id,
        chunks=list(chunks),
        failed=failed,
    )
    return reply(state, request, peer=worker.encode())


def status_of(state: RecordingState) -> dict[str, Any]:
    [save] = reply(state, m.GetStatus()).status["saves"]
    return save


def chunk(ordinal: int, elements: int = 10) -> list[Any]:
    return [ordinal, f"{ordinal:08d}-w-0.chunk", elements, 100, 7]


def test_each_split_is_written_once_and_the_manifest_lists_them(state, tmp_path):
    a = register_worker(state, "a:1")
    save_id = start(state, zd.Dataset.range(1000), tmp_path / "save")
    splits = status_of(state)["splits"]
    assert splits > 1
    seen, done = [], []
    got = ask(state, "a:1", a.worker_id, save_id)
    while not got.done:
        ordinal, lo, hi = got.split
        seen.append((lo, hi))
        got = ask(state, "a:1", a.worker_id, save_id, [chunk(ordinal, hi - lo)])
        done.append(ordinal)
    assert min(seen)[0] == 0
    assert max(seen)[1] == 1000
    assert sorted(done) == list(range(splits))
    manifest = json.loads((tmp_path / "save" / "manifest.json").read_text())
    assert [c["name"] for c in manifest["chunks"]] == [
        chunk(o)[1] for o in range(splits)
    ]
    assert manifest["cardinality"] == 1000
    assert status_of(state)["state"] == "finished"


def test_a_lost_workers_split_goes_to_the_next_worker_and_a_late_chunk_is_not_listed(
    state, tmp_path
):
    a, b = register_worker(state, "a:1"), register_worker(state, "b:1")
    save_id = start(state, zd.Dataset.range(64), tmp_path / "save")
    held = ask(state, "a:1", a.worker_id, save_id).split
    assert ask(state, "a:1", a.worker_id, save_id).split == held  # asked again
    send(
        state,
        m.WorkerHeartbeat(request_id=1, worker_id=a.worker_id, leaving=True),
        b"a:1",
    )
    assert ask(state, "b:1", b.worker_id, save_id).split == held
    mine = [held[0], "b.chunk", 5, 10, 1]
    late = [held[0], "a.chunk", 5, 10, 2]
    got = ask(state, "b:1", b.worker_id, save_id, [mine])
    b2 = register_worker(state, "c:1")
    ask(state, "c:1", b2.worker_id, save_id, [late])  # the lost worker's, too late
    names = {c[0] for c in state.records.saves[save_id].chunks.values()}
    assert "b.chunk" in names
    assert "a.chunk" not in names
    assert got.split != held


def test_a_failed_chunk_fails_the_save_and_workers_stop(state, tmp_path):
    a = register_worker(state, "a:1")
    save_id = start(state, zd.Dataset.range(64), tmp_path / "save")
    ask(state, "a:1", a.worker_id, save_id)
    got = ask(state, "a:1", a.worker_id, save_id, failed="No space left on device")
    assert got.done
    save = status_of(state)
    assert save["state"] == "failed"
    assert "No space left on device" in save["error"]
    assert not (tmp_path / "save" / "manifest.json").exists()


def test_the_same_save_is_found_again_and_another_one_is_refused(state, tmp_path):
    path = tmp_path / "save"
    first = start(state, zd.Dataset.range(64), path)
    assert start(state, zd.Dataset.range(64), path) == first
    registered = reply(
        state,
        m.GetOrRegisterDataset(request_id=3, pipeline=pipeline(zd.Dataset.range(9))),
    )
    refused = reply(
        state,
        m.StartSave(request_id=5, dataset_id=registered.dataset_id, path=str(path)),
    )
    assert isinstance(refused, m.Error)
    assert refused.code == "FAILED_PRECONDITION"
    assert str(path) in refused.message


@pytest.mark.parametrize(
    ("ds", "why"),
    [
        (zd.Dataset.from_generator(lambda: iter([1])), "has none"),
        (zd.Dataset.range(5).repeat(), "infinite"),
        (zd.Dataset.range(5).take(3), "take before distributed_save"),
    ],
)
def test_what_cannot_be_saved_split_by_split_is_refused(state, tmp_path, ds, why):
    registered = reply(
        state, m.GetOrRegisterDataset(request_id=3, pipeline=pipeline(ds))
    )
    refused = reply(
        state,
        m.StartSave(request_id=4, dataset_id=registered.dataset_id, path=str(tmp_path)),
    )
    assert isinstance(refused, m.Error)
    assert why in refused.message


@pytest.mark.parametrize(
    "fields",
    [
        {"chunks": [[0, "../x", 1, 1, 1]]},
        {"chunks": [[0, "a/b", 1, 1, 1]]},
        {"chunks": [[-1, "a", 1, 1, 1]]},
        {"chunks": [[0, "a", 1, 1, 2**32]]},
        {"chunks": [[0, "a", 1, 1]]},
        {"chunks": [[0, "a", 1, 1, 1]] * 65},
        {"failed": "x" * 5000},
    ],
)
def test_a_lying_report_is_refused_and_keeps_nothing(state, tmp_path, fields):
    a = register_worker(state, "a:1")
    save_id = start(state, zd.Dataset.range(64), tmp_path / "save")
    request = m.GetSaveSplit(
        request_id=9, worker_id=a.worker_id, save_id=save_id, **fields
    )
    assert reply(state, request, peer=b"a:1").code == "INVALID_ARGUMENT"
    assert state.records.saves[save_id].chunks == {}
    assert status_of(state)["state"] == "running"


def test_a_save_survives_a_replay_and_a_snapshot(state, tmp_path):
    a = register_worker(state, "a:1")
    save_id = start(state, zd.Dataset.range(64), tmp_path / "save")
    ordinal = ask(state, "a:1", a.worker_id, save_id).split[0]
    ask(state, "a:1", a.worker_id, save_id, [chunk(ordinal)])
    replayed = ClusterRecords()
    for event in state.log:
        replayed.apply(event)
    assert replayed.saves == state.records.saves
    copy = ClusterRecords()
    records_snapshot.load(copy, records_snapshot.dump(state.records))
    assert copy.saves == state.records.saves
