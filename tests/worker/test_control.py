"""The worker's control loop: what it does with the dispatcher's messages."""

from __future__ import annotations

import logging
import time

import pytest

from zmqdata._config import WorkerConfig
from zmqdata._wire import messages as m
from zmqdata._worker.server import WorkerServer


def test_a_malformed_task_is_logged_and_not_started(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="zmqdata")
    config = WorkerConfig(dispatcher_address="tcp://127.0.0.1:1")
    server = WorkerServer(config, start=False)
    try:
        server._control._take(m.ProcessTask(tasks=[{"task_id": "1"}]))
        assert len(server.stats()["tasks"]) == 0
    finally:
        server.stop()
    [line] = [record.getMessage() for record in caplog.records]
    assert "bad task from the dispatcher: task definition task_id" in line


def test_a_reply_to_no_request_wakes_the_worker_and_changes_nothing() -> None:
    config = WorkerConfig(dispatcher_address="tcp://127.0.0.1:1")
    server = WorkerServer(config, start=False)
    control = server._control
    try:
        control.core.next_send = float("inf")
        control._take(m.WorkerHeartbeatReply(trace=[5, 10**12, 0]))
        assert control.core.next_send <= time.monotonic()  # heartbeats now
        assert control._tracer.log is None  # the window opens with a real reply
    finally:
        server.stop()
