"""Split requests as a worker's task sends them: numbered, naming the task.

Also fake workers for a dispatcher on a socket: DEALERs speaking the real
protocol, registered and given the tasks of one DYNAMIC iteration.
"""

from __future__ import annotations

from typing import Any

import zmq

from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m
from zmqdata._wire.modes import ShardingPolicy


def next_split_request(
    state: DispatcherState, iteration_id: int, repetition: int = 0, index: int = 0
) -> m.GetSplit:
    """The next ``GetSplit`` of the iteration's ``index``-th task (none: task 0)."""
    iteration = state.records.iterations.get(iteration_id)
    tasks = list(iteration.tasks.values()) if iteration else []
    task = tasks[index] if index < len(tasks) else None
    if task is None:
        return m.GetSplit(
            request_id=1, iteration_id=iteration_id, repetition=repetition
        )
    last = task.last_split.request_id if task.last_split else 0
    return m.GetSplit(
        request_id=last + 1,
        iteration_id=iteration_id,
        repetition=repetition,
        task_id=task.task_id,
    )


def recv(sock: zmq.Socket[Any], kind: type[m.Message]) -> Any:
    """The next message of ``kind`` on ``sock`` (pushed tasks are skipped)."""
    assert sock.poll(10_000), f"no {kind.__name__} within 10 s"
    message = m.decode(sock.recv())
    while not isinstance(message, kind):
        assert not isinstance(message, m.Error), message
        assert sock.poll(10_000), f"no {kind.__name__} within 10 s"
        message = m.decode(sock.recv())
    return message


def fake_workers_of_an_iteration(
    target: str, dataset_id: str, workers: int
) -> tuple[list[zmq.Socket[Any]], m.IterationState]:
    """``workers`` fake workers registered at ``target``, and the state of a
    new DYNAMIC iteration of ``dataset_id`` (one task each); the caller closes
    the sockets."""
    context = zmq.Context.instance()
    sockets = []
    for i in range(workers):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(target)
        sockets.append(sock)
        address = f"h:{7000 + i}"
        register = m.RegisterWorker(
            request_id=1, worker_address=address, data_address=f"tcp://{address}"
        )
        sock.send(m.encode(register))
        recv(sock, m.RegisterWorkerReply)
    client = sockets[0]
    job = m.GetOrCreateJob(
        dataset_id=dataset_id, processing_mode=ShardingPolicy.DYNAMIC
    )
    client.send(m.encode(job))
    job_id = recv(client, m.GetOrCreateJobReply).job_id
    client.send(m.encode(m.GetOrCreateIteration(job_id=job_id, repetition=0)))
    return sockets, recv(client, m.IterationState)


def ask_split(
    sock: zmq.Socket[Any], iteration_id: int, task_id: int, request_id: int
) -> None:
    """Sends task ``task_id``'s split request ``request_id`` on ``sock``."""
    split = m.GetSplit(
        request_id=request_id, iteration_id=iteration_id, repetition=0, task_id=task_id
    )
    sock.send(m.encode(split))
