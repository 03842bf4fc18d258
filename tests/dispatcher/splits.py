"""Split requests as a worker's task sends them: numbered, naming the task."""

from __future__ import annotations

from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m


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
    last = task.last_split[0] if task.last_split else 0
    return m.GetSplit(
        request_id=last + 1,
        iteration_id=iteration_id,
        repetition=repetition,
        task_id=task.task_id,
    )
