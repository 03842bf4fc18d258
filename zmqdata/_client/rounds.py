"""``RoundPlan``: coordinated reads, one element per round, rounds in order (pure).

Round ``r`` is served by one task, chosen from the dispatcher's schedule: the
epoch ``(start, task_ids)`` with the largest ``start <= r`` gives task
``task_ids[(r - start) % len(task_ids)]``. Every consumer of the job computes the
same task for the same round, and the worker hands out round ``r`` only once
all consumers asked for it, so each round is ``num_consumers`` consecutive
elements of one worker's stream, element ``i`` for consumer ``i``.

The dispatcher promises that the schedule never changes below its *horizon*;
a consumer requests rounds below the horizon only, and asks for a further
horizon (a heartbeat with its current round) well before it gets there. A
worker that joins enters the schedule at the horizon; rounds owed by a task
whose worker died are skipped by every consumer alike. A round its worker has not started yet
(``ABSENT``) is asked again after ``NOT_FOUND_RETRY_S``. Its methods return
what to send and deliver (``instructions``).
"""

from __future__ import annotations

import itertools
from typing import Any

from zmqdata._client.core import ReadCore, Task
from zmqdata._client.instructions import (
    FromWorker,
    Instruction,
    ToWorker,
)
from zmqdata._client.options import ReadOptions
from zmqdata._client.refusals import refused
from zmqdata._wire import messages as m

DEFAULT_WINDOW = 256
"""Rounds requested ahead of the trainer when max_outstanding_requests is unset."""
NOT_FOUND_RETRY_S = 0.005
"""A round whose task its worker has not started yet is asked again after this."""
UNSENT_RETRY_S = 0.01
"""A request that could not be queued (the worker is gone) is retried after this."""

_SKIPPED = object()


class RoundPlan:
    """Reads one job as consumer ``consumer_index`` of ``num_consumers``."""

    def __init__(self, options: ReadOptions) -> None:
        assert options.consumer_index is not None
        self._consumer_index = options.consumer_index
        self._window = options.max_outstanding_requests or DEFAULT_WINDOW
        self._chunk = max(1, self._window // 4)
        self._schedule: list[tuple[int, list[int]]] = []
        self._horizon = 0
        self._next_request = 0  # the lowest round not asked for yet
        self._next_deliver = 0  # the next round the trainer gets
        self._batches: dict[int, tuple[int, list[int]]] = {}  # id -> task, rounds
        self._batch_ids = itertools.count(1)
        self._arrived: dict[int, Any] = {}  # round -> element, or _SKIPPED
        self._retry: list[tuple[float, list[int]]] = []  # (when, rounds)
        self._asking_horizon = False

    # ------------------------------------------------------------ dispatcher

    def current_round(self) -> int:
        """The lowest round not asked for yet (the dispatcher extends the horizon)."""
        return self._next_request

    def deal_position(self) -> list[int]:
        return []

    def forget(self, task: Task) -> None:
        """Rounds of a task that is gone are skipped in ``on_state``."""

    def on_state(self, core: ReadCore, state: m.IterationState) -> list[Instruction]:
        """Follows the schedule and its horizon; skips the rounds of tasks gone."""
        self._schedule = [(start, list(task_ids)) for start, task_ids in state.rounds]
        self._horizon = max(self._horizon, state.horizon)
        self._asking_horizon = False
        for batch_id, (task_id, rounds) in list(self._batches.items()):
            if task_id not in core.tasks:  # its worker is gone: nobody gets these
                del self._batches[batch_id]
                self._arrived.update(dict.fromkeys(rounds, _SKIPPED))
        return self._deliver_in_order(core)

    def _task_for(self, round_: int) -> int | None:
        epoch = None
        for start, task_ids in self._schedule:
            if start > round_:
                break
            epoch = (start, task_ids)
        if epoch is None or not epoch[1]:
            return None
        start, task_ids = epoch
        return task_ids[(round_ - start) % len(task_ids)]

    # ------------------------------------------------------------ workers

    def request_more(self, core: ReadCore, now: float) -> list[Instruction]:
        """Asks for the rounds due again and the window ahead, below the horizon."""
        wanted = self._due_again(now)
        counters = core.counters
        buffered = counters.received - counters.consumed
        limit = min(self._next_deliver + self._window - buffered, self._horizon)
        while self._next_request < limit and self._task_for(self._next_request):
            wanted.append(self._next_request)
            self._next_request += 1
        out = self._ask(core, wanted)
        counters.starved = self._next_request < self._horizon and (
            self._next_request >= limit
        )
        if self._horizon - self._next_request <= 2 * self._window:
            out += self._ask_for_horizon(core, now)
        return out

    def _due_again(self, now: float) -> list[int]:
        """The rounds to ask for again now (takes them off the retry list)."""
        due = [rounds for when, rounds in self._retry if when <= now]
        self._retry = [(when, rounds) for when, rounds in self._retry if when > now]
        return [r for rounds in due for r in rounds]

    def _ask(self, core: ReadCore, rounds: list[int]) -> list[Instruction]:
        """Asks each round's task for its rounds, in chunks pipelined to the worker."""
        out: list[Instruction] = []
        by_task: dict[int, list[int]] = {}
        for round_ in rounds:
            by_task.setdefault(self._task_for(round_) or 0, []).append(round_)
        for task_id, task_rounds in by_task.items():
            task = core.tasks.get(task_id)
            if task is None:  # the task's worker is gone: every consumer skips these
                self._arrived.update(dict.fromkeys(task_rounds, _SKIPPED))
                continue
            for i in range(0, len(task_rounds), self._chunk):
                out.append(self._send(core, task, task_rounds[i : i + self._chunk]))
        return out + self._deliver_in_order(core)

    def _send(self, core: ReadCore, task: Task, rounds: list[int]) -> ToWorker:
        batch_id = next(self._batch_ids)
        request = m.GetElements(
            request_id=batch_id,
            task_id=task.task_id,
            client_id=core.client_id,
            max_elements=len(rounds),
            rounds=rounds,
            consumer_index=self._consumer_index,
            ticket=task.ticket,
        )
        self._batches[batch_id] = (task.task_id, rounds)
        return ToWorker(task.endpoint, request)

    def on_unsent(self, request: m.GetElements, now: float) -> None:
        """A request that could not be queued (the worker is gone) is retried later."""
        batch = self._batches.pop(request.request_id, None)
        if batch is not None:
            self._retry.append((now + UNSENT_RETRY_S, batch[1]))

    def _ask_for_horizon(self, core: ReadCore, now: float) -> list[Instruction]:
        if self._asking_horizon:
            return []
        self._asking_horizon = True
        return core.heartbeat(now)

    def on_elements(
        self, core: ReadCore, header: m.Elements, reply: FromWorker, now: float
    ) -> list[Instruction]:
        """Takes a batch of rounds; hands out those next in order."""
        if header.request_id not in self._batches:
            return []
        del self._batches[header.request_id]
        elements, _ = reply.decoded()
        self._arrived.update(zip(header.rounds, elements, strict=True))
        return self._deliver_in_order(core)

    def on_error(self, core: ReadCore, error: m.Error, now: float) -> list[Instruction]:
        """``ABSENT``: the worker has not started the task yet: ask again soon."""
        batch = self._batches.pop(error.request_id, None)
        failure = refused(error)
        if failure is not None:
            return core.fail(failure)
        if batch is not None:
            self._retry.append((now + NOT_FOUND_RETRY_S, batch[1]))
        return []

    def _deliver_in_order(self, core: ReadCore) -> list[Instruction]:
        run = []
        while self._next_deliver in self._arrived:
            element = self._arrived.pop(self._next_deliver)
            self._next_deliver += 1
            if element is not _SKIPPED:
                run.append(element)
        return core.deliver(run, 0) if run else []
