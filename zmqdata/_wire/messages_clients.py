"""Control messages between the dispatcher and its clients.

Datasets, jobs, iterations, consumer heartbeats and the service status.

Imported through ``zmqdata._wire.messages``, which encodes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zmqdata._wire.messages_base import Message
from zmqdata._wire.modes import EXACTLY_ONCE


@dataclass(slots=True, kw_only=True)
class GetOrRegisterDataset(Message):
    TYPE: ClassVar[str] = "get_or_register_dataset"
    pipeline: bytes
    dataset_id: str | None = None
    compression: str | None = None
    element_spec: bytes = b""


@dataclass(slots=True, kw_only=True)
class GetOrRegisterDatasetReply(Message):
    TYPE: ClassVar[str] = "get_or_register_dataset_reply"
    dataset_id: str


@dataclass(slots=True, kw_only=True)
class GetDatasetInfo(Message):
    TYPE: ClassVar[str] = "get_dataset_info"
    dataset_id: str
    pipeline: bool = False
    """Send the registered pipeline too (``zmqdata lineage`` runs its splits)."""


@dataclass(slots=True, kw_only=True)
class GetDatasetInfoReply(Message):
    TYPE: ClassVar[str] = "get_dataset_info_reply"
    element_spec: bytes
    compression: str | None
    cardinality: int = -2
    """The dataset's cardinality (-1 infinite, -2 unknown)."""
    pipeline: bytes = b""
    """The registered pipeline (``graph.serialize``), if asked for."""


def request_key() -> bytes:
    """A fresh idempotency key: a retried request carries the same one."""
    return os.urandom(16)


@dataclass(slots=True, kw_only=True)
class GetOrCreateJob(Message):
    """Finds or creates a job; ``request_key`` makes a retry find the job it made.

    ``local_process``: the consumer's process (``target_workers="LOCAL"`` jobs
    give tasks only to workers in their consumers' processes).
    """

    TYPE: ClassVar[str] = "get_or_create_job"
    request_key: bytes = field(default_factory=request_key)
    local_process: str = ""
    dataset_id: str
    processing_mode: int
    job_name: str | None = None
    num_consumers: int | None = None
    target_workers: str = "AUTO"
    cross_trainer_cache: bool = False
    exactly_once: bool = EXACTLY_ONCE
    """DYNAMIC: track every element, so a lost worker's undelivered elements
    are handed out again (docs/reliability.md)."""
    seed: int | None = None
    """DYNAMIC: hand each epoch's splits out in an order drawn from (seed, epoch)."""


@dataclass(slots=True, kw_only=True)
class GetOrCreateJobReply(Message):
    TYPE: ClassVar[str] = "get_or_create_job_reply"
    job_id: int


@dataclass(slots=True, kw_only=True)
class GetOrCreateIteration(Message):
    """Joins iteration ``repetition`` of a job; the reply names this consumer.

    A retry (same ``request_key``) is answered as the consumer it created.
    """

    TYPE: ClassVar[str] = "get_or_create_iteration"
    job_id: int
    repetition: int
    request_key: bytes = field(default_factory=request_key)
    resume: list[int] | None = None
    """Resuming a saved read: the keys (``lineage``, flat ranges) its consumer
    had consumed; a new iteration hands out only the others."""
    resume_deal: list[int] | None = None
    """Resuming a multi-rank read: ``deal.Resume.to_wire()`` of the merged position."""


@dataclass(slots=True, kw_only=True)
class IterationState(Message):
    """The tasks a consumer should read and whether the iteration is over."""

    TYPE: ClassVar[str] = "iteration_state"
    client_id: int
    iteration_id: int
    tasks: list[dict[str, Any]]
    finished: bool
    rounds: list[list[Any]] = field(default_factory=list)
    """Coordinated reads: ``[[start_round, [task_id, ...]], ...]``, the task set
    that serves rounds from ``start_round`` on (round r: task ``(r - start) % n``)."""
    horizon: int = 0
    """Coordinated reads: no round at or past this will ever change schedule."""
    incarnation: str = ""
    """Names the dispatcher's state; a change means it restarted and forgot it."""
    task_epoch: int = 0
    """Exactly once: counts the tasks the iteration lost; a consumer echoes the
    last it applied, which tells the dispatcher it reads none of them any more."""
    deal: dict[str, Any] = field(default_factory=dict)
    """Multi-rank reads: ``epoch``, ``splits`` (how many this epoch has),
    ``stream`` (``deal.Stream.to_wire``), ``start`` (first ordinal), ``owners``
    (``[ordinal, task_id, ...]`` of the splits handed out and not released)."""
    trace: list[int] = field(default_factory=list)
    """As ``WorkerHeartbeatReply.trace``, to consumers that share traces."""
    revision: int = 0
    """Names what this state tells (tasks, end, schedule, epoch): a consumer
    echoes it (``ClientHeartbeat.known``) and is answered ``unchanged`` while
    it holds."""
    unchanged: bool = False
    """The consumer's ``known`` revision is current: ``tasks``, ``rounds`` and
    ``deal`` are left empty; the rest is as in a full state."""
    fence_timeout_ms: int = 0
    """The dispatcher's ``fence_timeout_ms`` (0: not said): a reader silent
    for half of it may have been fenced, and a quiet one heartbeats sooner."""


@dataclass(slots=True, kw_only=True)
class ClientHeartbeat(Message):
    """A consumer's liveness, with the tasks it has read to the end."""

    TYPE: ClassVar[str] = "client_heartbeat"
    client_id: int
    finished_tasks: list[int] = field(default_factory=list)
    current_round: int | None = None
    """Coordinated reads: the highest round this consumer has asked for."""
    acked: list[list[int]] = field(default_factory=list)
    """Exactly once: ``[task_id, lo, hi, ...]``, the keys of elements received."""
    progress: list[list[int]] = field(default_factory=list)
    """Exactly once: the marks of elements received (``Elements.progress``)."""
    task_epoch: int = 0
    """Exactly once: the ``IterationState.task_epoch`` this consumer applied."""
    starved: float = 0.0
    """Autoscaling: the fraction of the time since the last heartbeat that the
    trainer waited with nothing buffered (demand the workers did not meet)."""
    deal: list[int] = field(default_factory=list)
    """Multi-rank reads: ``[consumer_index, ordinal, index]``, the first element
    this consumer has not received (``ordinal`` = the epoch's splits: all)."""
    consumed: int = 0
    """Observability: the elements the trainer has taken (its rate and lag)."""
    consumer_index: int | None = None
    """Observability: the consumer's rank in its job, if it has one."""
    share_traces: bool = False
    """The trainer opted in to traces (``service.share_traces``): tell it of windows."""
    known: int = 0
    """The ``IterationState.revision`` this consumer holds (0: none)."""


@dataclass(slots=True, kw_only=True)
class ReleaseIterationClient(Message):
    TYPE: ClassVar[str] = "release_iteration_client"
    client_id: int
    acked: list[list[int]] = field(default_factory=list)
    """As ``ClientHeartbeat.acked``: what was received since the last heartbeat."""
    deal: list[int] = field(default_factory=list)
    """As ``ClientHeartbeat.deal``."""


@dataclass(slots=True, kw_only=True)
class GetStatus(Message):
    TYPE: ClassVar[str] = "get_status"


@dataclass(slots=True, kw_only=True)
class GetStatusReply(Message):
    TYPE: ClassVar[str] = "get_status_reply"
    status: dict[str, Any]
