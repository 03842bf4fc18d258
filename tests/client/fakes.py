"""A ``ReadCore`` wired to a recording transport and link table, on a fake clock."""

from __future__ import annotations

from typing import Any

from zmqdata._client.core import Counters, Plan, ReadCore, ReadOptions, Timeouts
from zmqdata._client.credit import CreditPlan
from zmqdata._client.rounds import RoundPlan
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import TaskInfo

TIMEOUTS = Timeouts(heartbeat_s=1.0, dispatcher_timeout_s=10.0, worker_timeout_s=5.0)


class Recorder:
    """The core's transport: keeps what it sent; ``refuse`` endpoints drop sends."""

    def __init__(self) -> None:
        self.to_workers: list[tuple[str, m.GetElements]] = []
        self.heartbeats: list[m.ClientHeartbeat] = []
        self.trainer: list[Any] = []
        self.refuse: set[str] = set()

    def to_worker(self, endpoint: str, request: m.GetElements) -> bool:
        if endpoint in self.refuse:
            return False
        self.to_workers.append((endpoint, request))
        return True

    def to_dispatcher(self, message: m.Message) -> None:
        assert isinstance(message, m.ClientHeartbeat)
        self.heartbeats.append(message)

    def to_trainer(self, item: Any) -> None:
        self.trainer.append(item)

    def take(self) -> list[m.GetElements]:
        """The requests sent since the last call."""
        sent = [request for _, request in self.to_workers]
        self.to_workers.clear()
        return sent


class LinkTable:
    """Link state as the reader's monitors would report it."""

    def __init__(self) -> None:
        self.down_since: dict[str, float] = {}
        self.lost_links: set[str] = set()

    def lost(self, endpoint: str) -> bool:
        return endpoint in self.lost_links

    def down_for(self, endpoint: str, now: float) -> float:
        since = self.down_since.get(endpoint)
        return 0.0 if since is None else now - since


def options(**overrides: Any) -> ReadOptions:
    """The options of a plain first-come read, with ``overrides``."""
    fields: dict[str, Any] = {
        "service": "tcp://d:1",
        "dataset_id": "ds",
        "processing_mode": 0,
        "job_name": None,
        "max_outstanding_requests": None,
        "data_transfer_protocol": None,
        "target_workers": "ANY",
    }
    return ReadOptions(**(fields | overrides))


def state(
    task_ids: list[int], finished: bool = False, **extra: Any
) -> m.IterationState:
    """The dispatcher's task list: task ``i`` served by ``tcp://w:i``."""
    tasks = [
        TaskInfo(
            task_id=i, worker_id=i, worker_address=f"w:{i}", data_address=f"tcp://w:{i}"
        ).to_wire()
        for i in task_ids
    ]
    return m.IterationState(
        client_id=7, iteration_id=1, tasks=tasks, finished=finished, **extra
    )


class Reader:
    """A core, its plan and its fakes; ``now`` is the fake clock."""

    def __init__(self, read: ReadOptions, tasks: list[int], **extra: Any) -> None:
        self.counters = Counters()
        self.sent, self.links = Recorder(), LinkTable()
        plan: Plan = (
            CreditPlan(read, self.counters)
            if read.num_consumers is None
            else RoundPlan(read)
        )
        self.now = 0.0
        self.core = ReadCore(
            read, TIMEOUTS, 7, self.counters, plan, self.sent, self.links, self.now
        )
        self.core.apply_state(state(tasks, **extra))
        self.core.request_more(self.now)

    def reply(
        self,
        request: m.GetElements,
        elements: list[Any],
        end: bool = False,
        lineage: list[int] | None = None,
        progress: list[list[int]] | None = None,
    ) -> None:
        """The worker answers ``request`` with ``elements`` (covering ``lineage``,
        one key each unless the last ones are dropped keys; marks ``progress``)."""
        group = frames.encode(elements) if elements else []
        header = m.Elements(
            request_id=request.request_id,
            task_id=request.task_id,
            count=len(elements),
            end_of_sequence=end,
            rounds=request.rounds[: len(elements)],
            parts=[len(group)] if group else [],
            lineage=lineage or [],
            widths=[len(elements), 1] if lineage and elements else [],
            progress=progress or [],
        )
        self.core.on_worker(header, [b"", *group], self.now)

    def error(self, request: m.GetElements, code: str) -> None:
        """The worker answers ``request`` with an error."""
        reply = m.Error(request_id=request.request_id, code=code, message="m")
        self.core.on_worker(reply, [b""], self.now)

    def consume(self, n: int) -> None:
        """The trainer takes ``n`` elements."""
        self.counters.consumed += n

    def advance(self, seconds: float) -> None:
        """Moves the clock on and ticks."""
        self.now += seconds
        self.core.tick(self.now)

    def elements(self) -> list[Any]:
        """Every element handed to the trainer so far."""
        return [
            e for item in self.sent.trainer if isinstance(item, tuple) for e in item[0]
        ]
