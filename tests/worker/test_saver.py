"""SaveRunner writes the splits a save's dispatcher hands it as chunks, and reports them.

A fake dispatcher (a ROUTER socket in the test, speaking the real messages)
answers the runner's ``GetSaveSplit`` requests with the replies each test
gives, and keeps the requests for the test to check.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from tests.helpers import poll_for
from zmqdata import Dataset
from zmqdata._config import WorkerConfig
from zmqdata._dataset import graph, snapshot
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import SaveDef
from zmqdata._worker.pipelines import Pipeline
from zmqdata._worker.saver import SaveRunner
from zmqdata._worker.server import WorkerServer


class FakeDispatcher:
    """Answers each ``GetSaveSplit`` with the reply the test gives."""

    def __init__(self) -> None:
        self._sock = zmq.Context.instance().socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.target = f"tcp://127.0.0.1:{port}"

    def request(self, timeout_s: float = 5.0) -> tuple[bytes, m.GetSaveSplit]:
        """The next request (it must come within ``timeout_s``) and its sender."""
        assert self._sock.poll(int(timeout_s * 1000)), "no save split request"
        peer, data = self._sock.recv_multipart()
        request = m.decode(data)
        assert isinstance(request, m.GetSaveSplit)
        return peer, request

    def answer(
        self, split: list[int] | None = None, done: bool = False
    ) -> m.GetSaveSplit:
        """Answers the next request with ``split`` (or none, or ``done``); the request."""
        peer, request = self.request()
        reply = m.GetSaveSplitReply(
            request_id=request.request_id, split=split or [], done=done
        )
        self._sock.send_multipart([peer, m.encode(reply)])
        return request

    def pending(self) -> bool:
        """Whether a request waits, unanswered."""
        return bool(self._sock.poll(0))

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def dispatcher() -> Iterator[FakeDispatcher]:
    fake = FakeDispatcher()
    yield fake
    fake.close()


def _double(x):
    return x * 2


def _fail_at_5(x):
    if x == 5:
        raise ValueError("boom at 5")
    return x


def _slow(x):
    threading.Event().wait(0.001)
    return x


def _runner(
    dataset: Dataset,
    path: Path,
    dispatcher: FakeDispatcher,
    compression: str | None = None,
    timeout_s: float = 5.0,
) -> SaveRunner:
    save = SaveDef(
        save_id="s1",
        dataset_id="d1",
        pipeline=b"",
        path=str(path),
        compression=compression,
    )
    pipeline = Pipeline(graph.serialize(dataset._node))
    runner = SaveRunner(save, pipeline, 7, dispatcher.target, timeout_s)
    runner.start()
    return runner


def _files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def _read(path: Path, report: list, compression: str | None = None) -> list:
    _, name, elements, size, crc32 = report
    info = {"name": name, "elements": elements, "bytes": size, "crc32": crc32}
    return list(snapshot.read_chunk(str(path), info, compression=compression))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_each_split_is_written_as_one_chunk_and_reported(
    tmp_path, dispatcher, compression
):
    dataset = Dataset.range(100).map(_double)
    runner = _runner(dataset, tmp_path, dispatcher, compression)
    first = dispatcher.answer([])  # every split is being written: asks again
    assert (first.worker_id, first.save_id, first.chunks, first.failed) == (
        7,
        "s1",
        [],
        "",
    )
    assert dispatcher.answer([0, 0, 60]).chunks == []
    second = dispatcher.answer([1, 60, 100])
    third = dispatcher.answer(done=True)
    poll_for(lambda: not runner.running)
    reports = second.chunks + third.chunks
    assert [report[0] for report in reports] == [0, 1]
    assert [report[2] for report in reports] == [60, 40]
    assert _read(tmp_path, reports[0], compression) == list(range(0, 120, 2))
    assert _read(tmp_path, reports[1], compression) == list(range(120, 200, 2))
    for report in reports:  # the size and checksum of the file as stored
        data = (tmp_path / "chunks" / report[1]).read_bytes()
        assert report[3] == len(data)
        assert report[4] == zlib.crc32(data)
    assert _files(tmp_path) == sorted(f"chunks/{report[1]}" for report in reports)
    assert not third.failed
    runner.stop()


def test_a_chunk_whose_report_goes_unanswered_is_reported_again(tmp_path, dispatcher):
    runner = _runner(Dataset.range(10), tmp_path, dispatcher, timeout_s=1.0)
    dispatcher.answer([0, 0, 10])
    _, unanswered = dispatcher.request()
    again = dispatcher.answer(done=True)  # sent again: same request, same chunk
    assert again.request_id == unanswered.request_id
    assert again.chunks == unanswered.chunks
    assert [chunk[0] for chunk in again.chunks] == [0]
    poll_for(lambda: not runner.running)
    runner.stop()


def test_a_pipeline_that_raises_fails_the_save(tmp_path, dispatcher):
    runner = _runner(Dataset.range(10).map(_fail_at_5), tmp_path, dispatcher)
    dispatcher.answer([0, 0, 10])
    failed = dispatcher.answer([1, 10, 20])  # handed out anyway: not written
    assert failed.chunks == []
    assert "the pipeline raised ValueError: boom at 5" in failed.failed
    assert f"of the save at {tmp_path}" in failed.failed
    assert "chunk '00000000-" in failed.failed
    poll_for(lambda: not runner.running)  # no request after the failure
    assert not dispatcher.pending()
    assert _files(tmp_path) == []  # nothing committed, no temporary file left
    runner.stop()


def test_a_path_that_cannot_be_written_fails_the_save(tmp_path, dispatcher):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    path = blocker / "save"  # under a file: no folder can be made there
    runner = _runner(Dataset.range(10), path, dispatcher)
    dispatcher.answer([0, 0, 10])
    failed = dispatcher.answer()
    assert failed.chunks == []
    assert failed.failed.startswith("cannot write chunk '00000000-")
    assert str(path) in failed.failed
    poll_for(lambda: not runner.running)
    runner.stop()


def test_stop_mid_split_returns_promptly_and_commits_nothing(tmp_path, dispatcher):
    runner = _runner(Dataset.range(1_000_000).map(_slow), tmp_path, dispatcher)
    dispatcher.answer([0, 0, 1_000_000])
    poll_for(lambda: _files(tmp_path))  # the chunk's temporary file
    assert _files(tmp_path)[0].endswith(".tmp")
    start = time.monotonic()
    runner.stop()
    assert time.monotonic() - start < 1.0
    assert not runner.running
    assert _files(tmp_path) == []
    assert not dispatcher.pending()  # no report, no failure


def test_stop_while_the_dispatcher_is_silent_returns_promptly(tmp_path, dispatcher):
    runner = _runner(Dataset.range(10), tmp_path, dispatcher, timeout_s=30.0)
    dispatcher.request()  # never answered
    start = time.monotonic()
    runner.stop()
    assert time.monotonic() - start < 1.0
    assert not runner.running


def test_the_control_loop_runs_the_saves_listed_and_stops_the_others(
    tmp_path, dispatcher, caplog
):
    caplog.set_level(logging.WARNING, logger="zmqdata")
    server = WorkerServer(WorkerConfig(dispatcher.target), start=False)
    control = server._control
    control.core.worker_id = 7
    data = graph.serialize(Dataset.range(10)._node)
    save = SaveDef(
        save_id="s1",
        dataset_id="d1",
        pipeline=data,
        path=str(tmp_path),
        fingerprint=graph.fingerprint(data),
    )
    held = dataclasses.replace(save, pipeline=b"")  # as listed once it is held
    try:
        control._take(
            m.WorkerHeartbeatReply(request_id=1, saves=[save.to_wire(), {"save_id": 1}])
        )
        runner = control._saves["s1"]
        assert list(control._saves) == ["s1"]
        assert dispatcher.request()[1].worker_id == 7  # its runner asks
        control._take(m.WorkerHeartbeatReply(request_id=1, saves=[held.to_wire()]))
        assert control._saves == {"s1": runner}
        control.core.worker_id = 8  # registered again: run anew under the new id
        control._take(m.WorkerHeartbeatReply(request_id=1, saves=[held.to_wire()]))
        assert not runner.running
        assert control._saves["s1"].worker_id == 8
        assert dispatcher.request()[1].worker_id == 8
        runner = control._saves["s1"]
        control._take(m.WorkerHeartbeatReply(request_id=1, saves=[]))
        assert control._saves == {}
        assert not runner.running
        control.core.draining = True  # a draining worker starts no save
        control._take(m.WorkerHeartbeatReply(request_id=1, saves=[held.to_wire()]))
        assert control._saves == {}
    finally:
        control._stop_saves()
        server.stop()
    [line] = [record.getMessage() for record in caplog.records]
    assert "bad save from the dispatcher: save definition" in line
