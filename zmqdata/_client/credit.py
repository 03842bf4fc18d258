"""``CreditPlan``: first-come reads, under a credit of elements and bytes (pure).

A reader keeps at most its credit of elements requested or buffered (workers
long-poll, so the first element of any task arrives as soon as it exists).
A task has one request in flight, for its share of the free credit; workers
answer with everything buffered, so small elements arrive in large batches.
When that share is more than ``REQUEST_BYTES`` of elements (large arrays), a
task gets requests of about ``REQUEST_BYTES`` each, ``PIPELINED_REQUESTS`` of
them in flight, so the link never idles while the next request travels.
Scarce credit goes to the task asked longest ago. A task its worker has not
started yet (``ABSENT``) is asked again with backoff. Its methods return
what to send (``instructions``); the fetcher sends it.
"""

from __future__ import annotations

from zmqdata._client.core import Counters, ReadCore, Task
from zmqdata._client.instructions import (
    FromWorker,
    Instruction,
    ToWorker,
)
from zmqdata._client.options import ReadOptions
from zmqdata._client.refusals import refused
from zmqdata._wire import messages as m

DEFAULT_MAX_OUTSTANDING = 8192
"""A first-come reader's credit without ``max_outstanding_requests``: deep enough
that small elements (blocks of a few hundred) stay in flight while the trainer
works through one reply (1,024 kept W1 at half the rate); the byte cap bounds
large ones."""
DEFAULT_MAX_BUFFERED_BYTES = 256 * 2**20
SHARED_MAX_OUTSTANDING = 128
"""Default credit of a consumer of a named job, which others may read too: one
consumer must not prefetch the whole job (tf.data's testSharedJobName)."""
REQUEST_BYTES = 16 * 2**20
"""Large elements are asked for about this many bytes per request, ..."""
PIPELINED_REQUESTS = 2
"""... with this many requests in flight per task (see the module docstring)."""


def default_credit(options: ReadOptions) -> int:
    """Credit without ``max_outstanding_requests``: small when consumers share elements.

    Consumers of a named job split its elements first come, first served; with
    a cross-trainer cache each trainer reads them all, so it keeps full credit.
    """
    shared = options.job_name is not None and options.trainer_id is None
    return SHARED_MAX_OUTSTANDING if shared else DEFAULT_MAX_OUTSTANDING


def _idle(core: ReadCore, tasks: list[Task], depth: int, now: float) -> list[Task]:
    """The tasks to ask now (fewer than ``depth`` requests in flight), longest idle first.

    A task waiting out a retry delay, or whose link is lost, is not asked.
    """
    idle = [
        t
        for t in tasks
        if len(t.requests) < depth
        and t.retry_at <= now
        and not core.links.lost(t.endpoint)
    ]
    return sorted(idle, key=lambda t: t.asked)  # scarce credit rotates over the tasks


class CreditPlan:
    """Asks every task for its share of the free credit, first come, first served."""

    def __init__(self, options: ReadOptions, counters: Counters) -> None:
        self._trainer_id = options.trainer_id
        self._counters = counters
        self._capacity = options.max_outstanding_requests or default_credit(options)
        self._byte_cap = (
            None if options.max_outstanding_requests else DEFAULT_MAX_BUFFERED_BYTES
        )
        self._in_flight = 0
        self._requests: dict[int, Task] = {}

    def current_round(self) -> None:
        """First-come readers have no round."""
        return

    def on_state(self, core: ReadCore, state: m.IterationState) -> list[Instruction]:
        """Nothing to follow beyond the task list."""
        return []

    def forget(self, task: Task) -> None:
        """Drops ``task``'s requests in flight, which will never be answered."""
        self._in_flight -= task.outstanding
        for request_id in task.requests:
            self._requests.pop(request_id, None)
        task.requests.clear()

    def request_more(self, core: ReadCore, now: float) -> list[Instruction]:
        """Asks the idle tasks (longest idle first) for their share of the credit."""
        readable = core.readable_tasks()
        chunk = self._pipelined_chunk(len(readable))
        idle = _idle(core, readable, 1 if chunk is None else PIPELINED_REQUESTS, now)
        free = self._free_credit(len(readable))
        self._counters.starved = bool(idle) and free <= 0
        out: list[Instruction] = []
        for task in idle:
            if free <= 0:
                break
            n = max(1, free // len(idle))
            if chunk is not None:
                n = min(n, chunk)
            request_id = core.next_request_id()
            request = m.GetElements(
                request_id=request_id,
                task_id=task.task_id,
                client_id=core.client_id,
                max_elements=n,
                trainer_id=self._trainer_id,
                ticket=task.ticket,
            )
            out.append(ToWorker(task.endpoint, request))
            task.requests[request_id] = n
            task.asked = request_id
            self._requests[request_id] = task
            self._in_flight += n
            free -= n
        return out

    def on_unsent(self, request: m.GetElements, now: float) -> None:
        """No way to the worker (it is gone): ask again later.

        Until the dispatcher drops its task.
        """
        task = self._requests.pop(request.request_id, None)
        if task is not None:
            self._in_flight -= task.requests.pop(request.request_id, 0)
            task.retry_later(now)

    def _pipelined_chunk(self, tasks: int) -> int | None:
        """Elements per pipelined request, or None to ask for the whole share.

        Requests are pipelined when a task's share of credit is worth more
        than ``REQUEST_BYTES`` of elements (by the running average size).
        """
        average = self._counters.average_size()
        if average is None or not tasks:
            return None
        chunk = max(1, REQUEST_BYTES // average)
        return chunk if chunk < self._capacity // tasks else None

    def _free_credit(self, tasks: int) -> int:
        """The elements to ask ``tasks`` readable tasks for now."""
        counters = self._counters
        buffered = counters.received - counters.consumed
        free = self._capacity - self._in_flight - buffered
        if self._byte_cap is None:
            return free
        average = counters.average_size()
        if average is None:
            # No element size known yet: one element in flight per task, whose
            # first reply shows the size (one task alone may be a worker that
            # cannot answer until the dispatcher drops it: the read would stall).
            return min(free, max(1, tasks) - self._in_flight - buffered)
        buffered_bytes = counters.received_bytes - counters.consumed_bytes
        by_bytes = (self._byte_cap - buffered_bytes) // average - self._in_flight
        return min(free, by_bytes)

    def deal_position(self) -> list[int]:
        return []

    def on_elements(
        self, core: ReadCore, header: m.Elements, reply: FromWorker, now: float
    ) -> list[Instruction]:
        """Delivers a reply's elements; a task at its end is reported once it owes nothing."""
        task = self._requests.pop(header.request_id, None)
        if task is None:
            return []  # the task was dropped meanwhile (with its requests)
        self._in_flight -= task.requests.pop(header.request_id, 0)
        task.backoff.reset()
        out = core.deliver(*reply.decoded(), task.task_id, header)
        if header.end_of_sequence:
            task.finished = True
        return out + core.report_if_finished(task, now)

    def on_error(self, core: ReadCore, error: m.Error, now: float) -> list[Instruction]:
        """``ABSENT``: the worker has not started the task yet: ask again soon."""
        task = self._requests.pop(error.request_id, None)
        if task is None:
            return []  # answers a request dropped with its task (a worker that left)
        failure = refused(error)
        if failure is not None:
            return core.fail(failure)
        self._in_flight -= task.requests.pop(error.request_id, 0)
        if task.finished:
            return core.report_if_finished(task, now)
        task.retry_later(now)
        return []
