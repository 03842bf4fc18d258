"""Snapshots written through, on ``DispatcherState``: no sockets, real folders.

A job over a pipeline with a ``snapshot`` opens its save (journaled, replayed,
in the state snapshot); each split goes out with the snapshot's word on it
(``GetSplitReply.chunks``): none yet, then the chunk a task reported with its
split request, the first report of a split kept; the manifest is written once
every split has its chunk, and later jobs adopt a finished folder, refusing
one that holds another pipeline's save or chunks cut otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.dispatcher.splits import next_split_request
from tests.dispatcher.test_replay import RecordingState, replayed_and_loaded
from tests.dispatcher.test_state import (
    create_job,
    heartbeat,
    join,
    pipeline,
    register_dataset,
    register_worker,
    reply,
)
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import snapshot
from zmqdata._dataset.ops import cache
from zmqdata._wire import messages as m
from zmqdata._wire.modes import ShardingPolicy
from zmqdata.errors import FailedPreconditionError

DYNAMIC = ShardingPolicy.DYNAMIC


@pytest.fixture
def state() -> RecordingState:
    return RecordingState(DispatcherConfig())


def snapshotted(path: Path, n: int = 100) -> zd.Dataset:
    return zd.Dataset.range(n).map(abs).snapshot(str(path))


def start_job(state: RecordingState, ds: zd.Dataset) -> int:
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, pipeline(ds))
    job_id = create_job(state, dataset_id, DYNAMIC)
    return join(state, job_id).iteration_id


def ask(state: RecordingState, iteration_id: int, chunks: list[list[Any]] = ()) -> Any:
    request = next_split_request(state, iteration_id)
    request.chunks = list(chunks)
    request.max_splits = 4
    answer = reply(state, request)
    assert isinstance(answer, m.GetSplitReply), answer
    return answer


def report(ordinal: int, name: str = "") -> list[Any]:
    return [ordinal, name or f"{ordinal:08d}-w-0.chunk", 2, 10, 7]


def test_splits_go_out_unwritten_then_with_the_chunk_reported(state, tmp_path):
    ds = snapshotted(tmp_path)
    iteration_id = start_job(state, ds)
    first = ask(state, iteration_id)
    size = cache.chunk_size(ds._node.inputs[0])
    assert first.chunks == [[split[1] // size] for split in first.splits]
    assert all(len(split) == 5 for split in first.splits)  # outputs keys
    ordinal = first.chunks[0][0]
    ask(state, iteration_id, [report(ordinal), report(ordinal, "00000000-x-1.chunk")])
    [save] = state.records.saves.values()
    assert save.by_jobs
    assert save.chunks[ordinal][0] == f"{ordinal:08d}-w-0.chunk"
    worker = next(iter(state.records.workers.values()))
    beat = heartbeat(state, "a:1", worker.worker_id, [])
    assert isinstance(beat, m.WorkerHeartbeatReply)
    assert beat.saves == []  # written by jobs, not save runners
    replayed_and_loaded(state.log, state.records)


def test_the_manifest_is_written_once_every_split_has_its_chunk(state, tmp_path):
    ds = snapshotted(tmp_path, 10)
    iteration_id = start_job(state, ds)
    [save] = state.records.saves.values()
    folder = Path(save.path)
    for ordinal in range(save.num_splits):
        with snapshot.ChunkWriter(str(folder), f"{ordinal:08d}-w-0.chunk", None) as w:
            w.write(ordinal)
        ask(state, iteration_id, [[ordinal, *w.info.values()]])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["dataset_id"] == ds._node.args["fingerprint"]
    assert len(manifest["chunks"]) == save.num_splits
    assert not (folder / "SAVING").exists()
    [job] = reply(state, m.GetStatus()).status["jobs"]
    assert job["snapshot"] == {
        "path": str(folder),
        "state": "reading",
        "written": save.num_splits,
        "total": save.num_splits,
    }


def test_a_new_dispatcher_adopts_a_finished_snapshot(state, tmp_path):
    ds = snapshotted(tmp_path, 300)
    list(ds)  # written locally, one chunk per split
    iteration_id = start_job(state, ds)
    [save] = state.records.saves.values()
    assert (save.ended, save.error) == (True, "")
    assert len(save.chunks) == save.num_splits
    assert all(len(word) == 5 for word in ask(state, iteration_id).chunks)


def test_a_folder_with_chunks_cut_otherwise_is_refused_naming_it(state, tmp_path):
    ds = snapshotted(tmp_path, 300)
    folder = cache.directory(ds._node)
    snapshot.begin(folder, "s")
    with snapshot.ChunkWriter(folder, "00000000-s.chunk", None) as writer:
        writer.write(1)
    snapshot.write_manifest(
        folder,
        element_spec=b"",
        chunks=[writer.info],
        compression=None,
        cardinality=1,
        dataset_id=ds._node.args["fingerprint"],
    )
    register_worker(state, "a:1")
    dataset_id = register_dataset(state, pipeline(ds))
    answer = reply(
        state,
        m.GetOrCreateJob(request_id=4, dataset_id=dataset_id, processing_mode=DYNAMIC),
    )
    assert isinstance(answer, m.Error), answer
    assert "cut into 1 chunks" in answer.message
    assert folder in answer.message
    assert answer.code == FailedPreconditionError.code
