"""Control messages between the dispatcher and its workers.

Registration, heartbeats, pushed tasks and DYNAMIC splits.

Imported through ``zmqdata._wire.messages``, which encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from zmqdata._wire.messages_base import Message


@dataclass(slots=True, kw_only=True)
class RegisterWorker(Message):
    """A worker announces itself and the data endpoint it serves."""

    TYPE: ClassVar[str] = "register_worker"
    worker_address: str
    data_address: str
    tags: list[str] = field(default_factory=list)
    version: str = ""
    local_process: str = ""
    inproc_address: str = ""


@dataclass(slots=True, kw_only=True)
class RegisterWorkerReply(Message):
    TYPE: ClassVar[str] = "register_worker_reply"
    worker_id: int
    worker_index: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    heartbeat_max_ms: int = 0
    """The longest interval a quiet worker may leave between heartbeats (a
    quarter of ``worker_timeout_ms``; 0: its own interval, always)."""


@dataclass(slots=True, kw_only=True)
class WorkerHeartbeat(Message):
    """A worker's liveness and its tasks' states ``[[task_id, finished], ...]``.

    ``stats``: the worker's serving counters and buffer fill (see
    ``zmqdata/_worker/stats.py: worker_stats``); liveness data, not state.
    """

    TYPE: ClassVar[str] = "worker_heartbeat"
    worker_id: int
    tasks: list[list[Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    draining: bool = False
    """The worker is leaving: it takes no new task (autoscaling, SIGTERM)."""
    leaving: bool = False
    """The worker has drained and stops now: its tasks are lost at once."""
    pipelines: list[str] = field(default_factory=list)
    """Fingerprints of the pipelines the worker holds: task definitions of
    their datasets come without them (``_worker/pipelines.py``). With a
    ``base``, empty means the same as that heartbeat's."""
    base: int = 0
    """0: ``stats`` and ``pipelines`` are complete. Else the request id of the
    heartbeat they are a delta against, the last one answered
    (``_wire/deltas.py``)."""


MAX_PIPELINES_HELD = 64
"""The most pipelines a worker's heartbeat may say it holds."""
MAX_FINGERPRINT_CHARS = 64
"""The longest pipeline fingerprint a heartbeat may name (``graph.fingerprint``: 32)."""


@dataclass(slots=True, kw_only=True)
class WorkerHeartbeatReply(Message):
    TYPE: ClassVar[str] = "worker_heartbeat_reply"
    new_tasks: list[dict[str, Any]] = field(default_factory=list)
    tasks_to_delete: list[int] = field(default_factory=list)
    trace: list[int] = field(default_factory=list)
    """A trace window is open: ``[trace_id, until_ns, now_ns]``, the
    dispatcher's clock (``_runtime/spans.py``); empty otherwise."""
    saves: list[dict[str, Any]] = field(default_factory=list)
    """The saves running (``tasks.SaveDef`` maps): the worker writes chunks
    of each (``_worker/saver.py``) until one is no longer listed."""
    resend: bool = False
    """The heartbeat's ``base`` is not the one the dispatcher holds: the next
    heartbeat carries everything."""


@dataclass(slots=True, kw_only=True)
class ProcessTask(Message):
    """Pushed by the dispatcher: start these tasks now (heartbeats are the fallback)."""

    TYPE: ClassVar[str] = "process_task"
    tasks: list[dict[str, Any]]


@dataclass(slots=True, kw_only=True)
class GetSplit(Message):
    """A DYNAMIC task asks for its next splits of ``repetition``.

    Idempotent: ``request_id`` counts the task's split requests, and a request
    sent again (a retry after a stall or a dispatcher restart) gets the splits
    it was given the first time.
    """

    TYPE: ClassVar[str] = "get_split"
    iteration_id: int
    repetition: int
    task_id: int = 0
    max_splits: int = 1
    """At most this many consecutive splits (cheap splits, such as one file
    each, are asked for several at a time: one round trip, not one each)."""
    counts: list[int] = field(default_factory=list)
    """Multi-rank reads: ``[ordinal, count, ...]`` of splits this task finished."""
    empty_pass: bool = False
    """The pass of an endless ``repeat`` before ``repetition`` made nothing on
    this task (``_dispatcher/empty_passes.py``: the read ends when every task
    that took splits of it says so)."""
    chunks: list[list[Any]] = field(default_factory=list)
    """Under a ``snapshot``: ``[ordinal, name, elements, bytes, crc32]`` of
    each chunk this task committed since its last request."""
    chunk_failed: str = ""
    """Under a ``snapshot``: why this task could not write a chunk (the
    snapshot's save fails with it)."""


@dataclass(slots=True, kw_only=True)
class GetSplitReply(Message):
    TYPE: ClassVar[str] = "get_split_reply"
    splits: list[list[int]] = field(default_factory=list)
    """One or more splits ``[repetition, lo, hi]``: source elements ``lo`` to
    ``hi`` (excluded; files by position) of that repetition. Consecutive new
    splits, or parts of splits handed out again (a lost worker's); none with
    ``end_of_splits``, none without it: nothing to hand out now, ask again."""
    end_of_splits: bool = False
    repetition: int = 0
    """The repetition the dispatcher is handing out splits of now."""
    progress: list[list[int]] = field(default_factory=list)
    """Exactly once: with a lost task's keys, the latest marks acknowledged of
    the roots among them (``_wire/progress.py``): outputs not to make again."""
    released: int = 0
    """Multi-rank reads: every consumer is past the splits below this ordinal
    (a worker drops what it still holds of them). Splits are then
    ``[repetition, lo, hi, ordinal, skip]``: the first ``skip`` elements the
    split makes are not kept (every consumer has them)."""
    period_ms: int = 0
    """Ask no more often than this: take enough splits to last it (a large
    fleet's workers ask less often, each for more; ``_dispatcher/splits.py``
    ``split_period_ms``). 0: as often as the round trip makes worthwhile."""
    exhausted: bool = False
    """With ``end_of_splits``: a whole pass of the endless ``repeat`` made
    nothing on any worker, so every later one would too; the read ends."""
    chunks: list[list[Any]] = field(default_factory=list)
    """Under a ``snapshot``, one per split: ``[ordinal, name, elements, bytes,
    crc32]`` of its chunk to read, or ``[ordinal]`` where the snapshot holds
    none yet (make the split, and write it)."""
