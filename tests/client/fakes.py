"""A ``ReadCore`` driven as the fetcher drives it, on a fake clock.

``Driven`` feeds the core events (``handle``, ``tick``) and carries out the
instructions it returns into a ``Recorder``, as ``reader.Fetcher`` does with
its sockets and queue.
"""

from __future__ import annotations

from typing import Any

from zmqdata._client import instructions as i
from zmqdata._client.core import END, Counters, Failure, Plan, ReadCore
from zmqdata._client.credit import CreditPlan
from zmqdata._client.options import ReadOptions, Timeouts
from zmqdata._client.rounds import RoundPlan
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import TaskInfo

TIMEOUTS = Timeouts(heartbeat_s=1.0, dispatcher_timeout_s=10.0, worker_timeout_s=5.0)


class Recorder:
    """Where instructions go: kept; sends to ``refuse`` endpoints are not queued."""

    def __init__(self) -> None:
        self.to_workers: list[tuple[str, m.GetElements]] = []
        self.heartbeats: list[m.ClientHeartbeat] = []
        self.trainer: list[Any] = []
        """What the trainer's queue got: batches, ``END``, ``Failure``s."""
        self.refuse: set[str] = set()
        self.dropped = 0

    def carry_out(self, instruction: i.Instruction) -> bool:
        """Records ``instruction``; False for a send that could not be queued."""
        if isinstance(instruction, i.ToWorker):
            if instruction.endpoint in self.refuse:
                return False
            self.to_workers.append((instruction.endpoint, instruction.request))
        elif isinstance(instruction, i.ToDispatcher):
            assert isinstance(instruction.message, m.ClientHeartbeat)
            self.heartbeats.append(instruction.message)
        elif isinstance(instruction, i.Deliver):
            self.trainer.append(instruction.batch)
        elif isinstance(instruction, i.End):
            self.trainer.append(END)
        elif isinstance(instruction, i.Fail):
            self.trainer.append(Failure(instruction.error))
        else:
            self.dropped += instruction.elements
        return True

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


class Driven:
    """A ``ReadCore`` fed events as the fetcher feeds it; its instructions recorded.

    The methods are the events' (the core's other attributes read through).
    """

    def __init__(self, core: ReadCore, sent: Recorder) -> None:
        self.core, self.sent = core, sent
        self.instructions: list[i.Instruction] = []
        """Every instruction the core returned, in order."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def handle(self, event: i.Event, now: float) -> None:
        """Feeds ``event``; carries out the instructions (refused sends: ``Unsent``)."""
        self.run(self.core.handle(event, now), now)

    def run(self, instructions: list[i.Instruction], now: float) -> None:
        """Carries out ``instructions`` in order."""
        self.instructions += instructions
        for instruction in instructions:
            if not self.sent.carry_out(instruction):
                assert isinstance(instruction, i.ToWorker)
                self.handle(i.Unsent(instruction.request), now)

    def apply_state(self, state: m.IterationState, now: float = 0.0) -> None:
        self.handle(i.Started(state), now)

    def on_dispatcher(self, message: m.Message, now: float) -> None:
        self.handle(i.FromDispatcher(message), now)

    def on_worker(self, header: m.Message, parts: list[Any], now: float) -> None:
        self.handle(i.received(header, parts), now)

    def on_links_lost(self, endpoints: list[str], now: float) -> None:
        self.handle(i.LinksLost(endpoints), now)

    def request_more(self, now: float) -> None:
        self.handle(i.Drained(), now)

    def tick(self, now: float) -> None:
        self.run(self.core.tick(now), now)

    def heartbeat(self, now: float) -> None:
        self.run(self.core.heartbeat(now), now)


def driven(read: ReadOptions, plan: Plan, counters: Counters | None = None) -> Driven:
    """A core of client 7 reading with ``plan``, driven into a new ``Recorder``."""
    core = ReadCore(read, TIMEOUTS, 7, counters or Counters(), plan, LinkTable(), 0.0)
    return Driven(core, Recorder())


class Reader:
    """A core, its plan and its fakes; ``now`` is the fake clock."""

    def __init__(self, read: ReadOptions, tasks: list[int], **extra: Any) -> None:
        self.counters = Counters()
        plan: Plan = (
            CreditPlan(read, self.counters)
            if read.num_consumers is None
            else RoundPlan(read)
        )
        self.now = 0.0
        self.core = driven(read, plan, self.counters)
        self.sent, self.links = self.core.sent, self.core.core.links
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
        self.counters.taken += n

    def advance(self, seconds: float) -> None:
        """Moves the clock on and ticks."""
        self.now += seconds
        self.core.tick(self.now)

    def elements(self) -> list[Any]:
        """Every element handed to the trainer so far."""
        return [
            e for item in self.sent.trainer if isinstance(item, tuple) for e in item[0]
        ]
