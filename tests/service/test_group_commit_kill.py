"""Group commit under SIGKILL: every split a worker got is in the journal.

Many fake workers (DEALERs speaking the real protocol) ask a fault-tolerant
dispatcher process for splits at once, so requests are handled in groups; the
dispatcher is killed -9 right after replies arrive, with requests in flight.
Every split handed out must be in the journal it leaves behind.
"""

from __future__ import annotations

import signal
from contextlib import ExitStack

import pytest

import zmqdata as zd
from tests.cli.procs import zmqdata
from tests.dispatcher.splits import ask_split, fake_workers_of_an_iteration, recv
from tests.service.cluster import free_port
from zmqdata import service
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.journal import Journal
from zmqdata._dispatcher.splits import split_size
from zmqdata._wire import messages as m

pytestmark = pytest.mark.timeout(60)

ELEMENTS = 1_000_000
WORKERS = 32


def test_every_split_received_before_a_kill_9_is_in_the_journal(tmp_path):
    port = free_port()
    work_dir = str(tmp_path / "state")
    target = f"tcp://127.0.0.1:{port}"
    with ExitStack() as stack:
        args = ("--port", str(port), "--fault-tolerant", "--work-dir", work_dir)
        dispatcher = stack.enter_context(zmqdata("dispatcher", *args))
        dispatcher.wait_for_line(r"dispatcher ready: ")
        dataset_id = service.register_dataset(
            target, zd.Dataset.range(ELEMENTS), compression=None
        )
        sockets, state = fake_workers_of_an_iteration(target, dataset_id, WORKERS)
        for sock in sockets:
            stack.callback(sock.close)
        tasks = [task["task_id"] for task in state.tasks]
        assert len(tasks) == WORKERS
        received: list[int] = []
        for request_id in range(1, 11):
            for sock, task_id in zip(sockets, tasks, strict=True):
                ask_split(sock, state.iteration_id, task_id, request_id)
            for sock in sockets:
                received.append(recv(sock, m.GetSplitReply).splits[0][1])
        for sock, task_id in zip(sockets, tasks, strict=True):
            ask_split(sock, state.iteration_id, task_id, 11)  # in flight at the kill
        received.append(recv(sockets[0], m.GetSplitReply).splits[0][1])
        dispatcher.stop(signal.SIGKILL)
    size = split_size(ELEMENTS)
    with Journal(work_dir) as journal:
        journaled = {
            event.index * size
            for event in journal.replay()
            if isinstance(event, ev.SplitProduced)
        }
    assert len(set(received)) == len(received) == 10 * WORKERS + 1
    assert set(received) <= journaled
